import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { watchOutput } from './diagnostics.js';

/**
 * A small OpenAI-compatible HTTP server for tests: the real `openai` SDK talks to it over real HTTP,
 * so retries, timeouts, headers and error mapping are exercised as in production. It listens on
 * 127.0.0.1 on a free port, records every request, and answers `POST /v1/chat/completions` from a
 * script: a queue of steps taken one per request, then a default handler.
 *
 * ```ts
 * const server = await startFakeOpenAI();
 * server.enqueue({ status: 429, headers: { 'retry-after': '1' } }, { content: { ok: true } });
 * server.script((body) => ({ content: answerFor(body.response_format?.json_schema?.name) }));
 * const model = new OpenAIModel({ model: 'gpt-4o-mini', baseURL: server.url, apiKey: 'sk-test' });
 * …
 * await server.close();
 * ```
 *
 * Not implemented: streaming (`stream: true` is answered with a 400), the Responses API. Tool calls
 * are answered as scripted (`toolCalls`); what the tools answered comes back in the next request.
 */

/** A successful chat completion. `content` objects are sent as their JSON text. */
export interface AnswerStep {
  status?: 200;
  content: string | object | null;
  /** `stop` unless given (`tool_calls` with `toolCalls`): `length`, `content_filter`, … */
  finishReason?: string;
  /** Function calls the answer asks for, OpenAI's `tool_calls` (`content` is then usually null). */
  toolCalls?: { id: string; name: string; arguments: string }[];
  refusal?: string | null;
  /** Token counts; estimated from text lengths unless given; `null` sends no `usage` at all. */
  usage?: { prompt_tokens: number; completion_tokens: number } | null;
  /** The model named in the answer; the requested model unless given. */
  model?: string;
  headers?: Record<string, string>;
  delayMs?: number;
}

/** An error answer in OpenAI's shape: `{ error: { message, type, code, param } }`. */
export interface ErrorStep {
  status: number;
  headers?: Record<string, string>;
  error?: { message: string; type?: string; code?: string | null; param?: string | null };
  /** A raw body instead of the JSON error object (a proxy's HTML page, say). */
  rawBody?: string;
  delayMs?: number;
}

/** Closes the socket without answering, as a crashed server or a proxy reset would. */
export interface DropStep {
  dropConnection: true;
  delayMs?: number;
}

/** Waits, then answers as the default handler would (ignoring any delay of the handler's own step). */
export interface DelayStep {
  delayMs: number;
}

/** One scripted answer. */
export type FakeStep = AnswerStep | ErrorStep | DropStep | DelayStep;

/** A request as the server received it. `body` is the parsed JSON, or the raw text when not JSON. */
export interface RecordedRequest {
  method: string;
  path: string;
  /** Lower-case header names. */
  headers: Record<string, string | string[] | undefined>;
  // biome-ignore lint/suspicious/noExplicitAny: tests read arbitrary fields of the request body.
  body: any;
  /** `Date.now()` when the body had been read. */
  receivedAt: number;
  /** `Date.now()` when the client closed the connection before the answer was sent (it aborted); else null. */
  abortedAt: number | null;
}

/** Computes a step from the request body (and the record of the request). */
// biome-ignore lint/suspicious/noExplicitAny: the body is whatever the client sent.
export type StepHandler = (body: any, request: RecordedRequest) => FakeStep;

/** A running fake server. */
export interface FakeOpenAI {
  /** Base URL for the SDK, ending in `/v1`. */
  url: string;
  /** Every request received, in order, including those answered with errors or dropped. */
  requests: RecordedRequest[];
  /** Only the `POST /v1/chat/completions` requests. */
  completions(): RecordedRequest[];
  /** Appends steps (or handlers) to the queue; each request takes the next one. */
  enqueue(...steps: (FakeStep | StepHandler)[]): void;
  /** Sets the handler for requests that find the queue empty. Without one they get a 400 that says so. */
  script(handler: StepHandler): void;
  /** Empties the queue, the record and the default handler. */
  reset(): void;
  /** Stops listening and destroys open connections, pending delays included. */
  close(): Promise<void>;
}

const estimateTokens = (text: string): number => Math.ceil(text.length / 4);

function promptText(body: unknown): string {
  const messages = (body as { messages?: { content?: unknown }[] } | null)?.messages;
  return Array.isArray(messages)
    ? messages.map((m) => (typeof m.content === 'string' ? m.content : '')).join('\n')
    : '';
}

function sendJson(
  res: ServerResponse,
  status: number,
  payload: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(payload);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

function openAIError(message: string, type = 'invalid_request_error', code: string | null = null) {
  return { error: { message, type, code, param: null } };
}

let completionCounter = 0;

function completion(step: AnswerStep, body: unknown) {
  const content =
    step.content === null || typeof step.content === 'string' ? step.content : JSON.stringify(step.content);
  const usage =
    step.usage === undefined
      ? { prompt_tokens: estimateTokens(promptText(body)), completion_tokens: estimateTokens(content ?? '') }
      : step.usage;
  const requested = (body as { model?: unknown } | null)?.model;
  completionCounter += 1;
  return {
    id: `chatcmpl-fake${completionCounter}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: step.model ?? (typeof requested === 'string' ? requested : 'fake-model'),
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content,
          refusal: step.refusal ?? null,
          ...(step.toolCalls === undefined
            ? {}
            : {
                tool_calls: step.toolCalls.map((call) => ({
                  id: call.id,
                  type: 'function',
                  function: { name: call.name, arguments: call.arguments },
                })),
              }),
        },
        logprobs: null,
        finish_reason: step.finishReason ?? (step.toolCalls === undefined ? 'stop' : 'tool_calls'),
      },
    ],
    ...(usage === null
      ? {}
      : { usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens } }),
  };
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** Starts a fake OpenAI-compatible server on 127.0.0.1 and a free port. */
export async function startFakeOpenAI(): Promise<FakeOpenAI> {
  const requests: RecordedRequest[] = [];
  const queue: (FakeStep | StepHandler)[] = [];
  let fallback: StepHandler | undefined;
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();

  const respond = (step: FakeStep, res: ServerResponse, record: RecordedRequest, body: unknown): void => {
    if ('dropConnection' in step) {
      res.socket?.destroy();
    } else if ('content' in step) {
      sendJson(res, 200, completion(step, body), step.headers);
    } else if ('status' in step) {
      if (step.rawBody !== undefined) {
        res.writeHead(step.status, { 'content-type': 'text/plain', ...step.headers });
        res.end(step.rawBody);
      } else {
        const error = step.error ?? { message: `fake server error ${step.status}` };
        sendJson(
          res,
          step.status,
          { error: { type: 'server_error', code: null, param: null, ...error } },
          step.headers,
        );
      }
    } else {
      respond(nextDefault(body, record), res, record, body);
    }
  };

  const nextDefault = (body: unknown, record: RecordedRequest): FakeStep =>
    fallback
      ? fallback(body, record)
      : // 400 is not retried by the SDK, so a test that under-scripts fails at once with this message.
        {
          status: 400,
          error: { message: `fake OpenAI server: nothing scripted for request #${requests.length}` },
        };

  const handleCompletion = (body: unknown, record: RecordedRequest, res: ServerResponse): void => {
    if ((body as { stream?: unknown } | null)?.stream === true) {
      sendJson(res, 400, openAIError('fake OpenAI server: streaming is not implemented'));
      return;
    }
    const next = queue.shift();
    const step =
      next === undefined ? nextDefault(body, record) : typeof next === 'function' ? next(body, record) : next;
    const delay = step.delayMs ?? 0;
    if (delay <= 0) {
      respond(step, res, record, body);
      return;
    }
    const timer = setTimeout(() => {
      timers.delete(timer);
      if (!res.destroyed) respond(step, res, record, body);
    }, delay);
    timers.add(timer);
    // A client that gives up (its timeout) closes the socket: the delayed answer is dropped.
    res.on('close', () => {
      clearTimeout(timer);
      timers.delete(timer);
    });
  };

  const watch = watchOutput('fake OpenAI server (in the test process)');
  const server = createServer((req, res) => {
    readBody(req).then(
      (text) => {
        const path = (req.url ?? '/').split('?')[0] ?? '/';
        const record: RecordedRequest = {
          method: req.method ?? 'GET',
          path,
          headers: { ...req.headers },
          body: parseJson(text),
          receivedAt: Date.now(),
          abortedAt: null,
        };
        const name = (record.body as { response_format?: { json_schema?: { name?: string } } } | null)
          ?.response_format?.json_schema?.name;
        const label = `#${requests.length + 1} ${req.method} ${path} ${name ?? ''}`;
        watch(`${label} received\n`);
        res.on('close', () => {
          if (!res.writableFinished) record.abortedAt = Date.now();
          watch(`${label} ${res.writableFinished ? `answered ${res.statusCode}` : 'aborted'}\n`);
        });
        requests.push(record);
        if (req.method === 'POST' && path === '/v1/chat/completions')
          handleCompletion(record.body, record, res);
        else if (req.method === 'GET' && path === '/v1/models') {
          sendJson(res, 200, {
            object: 'list',
            data: [{ id: 'fake-model', object: 'model', created: 0, owned_by: 'pge' }],
          });
        } else sendJson(res, 404, openAIError(`fake OpenAI server: no route ${req.method} ${path}`));
      },
      // A request whose body never arrives completely: nothing to answer, the client saw the reset.
      () => res.socket?.destroy(),
    );
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    completions: () => requests.filter((r) => r.method === 'POST' && r.path === '/v1/chat/completions'),
    enqueue: (...steps) => {
      queue.push(...steps);
    },
    script: (handler) => {
      fallback = handler;
    },
    reset: () => {
      queue.length = 0;
      requests.length = 0;
      fallback = undefined;
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        for (const timer of timers) clearTimeout(timer);
        timers.clear();
        for (const socket of sockets) socket.destroy();
        server.close((error) => (error ? reject(error) : resolve()));
      }),
  };
}
