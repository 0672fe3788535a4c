import type { APIError, ClientOptions, OpenAI } from 'openai';
import type {
  ChatCompletion,
  ChatCompletionCreateParamsNonStreaming,
  ChatCompletionMessageParam,
} from 'openai/resources/chat/completions';
import { z } from 'zod';
import { ConfigurationError, ModelRequestError, ModelTransportError } from '../errors.js';
import { isLoopbackUrl } from '../loopback.js';
import { retry } from '../retry.js';
import {
  BaseUrl,
  ModelClientSettings,
  type PriceTable,
  RoleModelSettings,
  type StructuredOutputMode,
} from '../schemas/settings.js';
import type { ChatMessage, Model, ModelAnswer, ModelRequest } from './model.js';
import { isQuotaExhausted, MAX_RETRY_WAIT_MS, modelRetries, retryAfterMs } from './openai-retries.js';
import { costOf, DEFAULT_PRICES, priceOf } from './pricing.js';

/**
 * The model client for OpenAI and OpenAI-compatible servers (vLLM, llama.cpp, Ollama, LM Studio,
 * proxies), on the official SDK. A failed call is tried again up to `maxRetries` times, by the
 * SDK's rules plus pge's two refusals (`openai-retries.ts`). Errors that remain are mapped to
 * `ModelTransportError` (worth trying again later) or `ModelRequestError` (the user must change
 * something), with messages that never contain the API key.
 */

/**
 * Options of `OpenAIModel`: the model, its key, and the shared model settings (`src/schemas`).
 * Unknown keys are a `ConfigurationError`.
 */
export const OpenAIModelOptions = z.strictObject({
  /** The model to call, also the `name` reported in events. */
  model: z.string().min(1),
  /** Defaults to `OPENAI_API_KEY`; a loopback server needs none. */
  apiKey: z.string().min(1).optional(),
  ...ModelClientSettings.shape,
  ...RoleModelSettings.shape,
});
export type OpenAIModelOptions = z.input<typeof OpenAIModelOptions>;

const DEFAULT_BASE_URL = 'https://api.openai.com/v1';
// The SDK refuses to start without a key; a local server ignores it.
const LOCAL_DUMMY_KEY = 'not-needed';
/** A base URL without credentials, query or trailing slash: safe for messages and logs. */
export function describeEndpoint(baseURL: string): string {
  try {
    const url = new URL(baseURL);
    return `${url.protocol}//${url.host}${url.pathname}`.replace(/\/+$/, '');
  } catch {
    return '(invalid base URL)';
  }
}

/** The SDK's module; `import type` above, so that only `loadSdk` loads it. */
type Sdk = typeof import('openai');
let sdk: Promise<Sdk> | undefined;

/**
 * The SDK, loaded at the first model call rather than with the library: it is the largest part
 * of the library's import time, and a process that never calls OpenAI (the demo model, another
 * `Model`, a worker of another role) need not pay for it.
 */
function loadSdk(): Promise<Sdk> {
  sdk ??= import('openai');
  return sdk;
}

const FENCED = /^\s*```[a-z]*\s*\n([\s\S]*?)\n?\s*```\s*$/i;

function withSchemaInstruction(
  request: ModelRequest,
  mode: Exclude<StructuredOutputMode, 'json_schema'>,
): ChatMessage[] {
  const schema = JSON.stringify(request.jsonSchema);
  const line =
    mode === 'json_object'
      ? `Answer with a JSON object that follows this JSON Schema (${request.schemaName}):\n${schema}`
      : `Answer with JSON only: one JSON object that follows this JSON Schema (${request.schemaName}), with no text before or after it and no code fence.\n${schema}`;
  const at = request.messages.findIndex((m) => m.role === 'system');
  if (at === -1) return [{ role: 'system', content: line }, ...request.messages];
  return request.messages.map((m, i) => (i === at ? { ...m, content: `${m.content}\n\n${line}` } : m));
}

/** A conversation's message as the SDK sends it: tool calls and tool answers in OpenAI's shape. */
function toSdkMessage(message: ChatMessage): ChatCompletionMessageParam {
  if (message.role === 'tool') {
    return { role: 'tool', tool_call_id: message.toolCallId ?? '', content: message.content };
  }
  if (message.role === 'assistant' && message.toolCalls !== undefined && message.toolCalls.length > 0) {
    return {
      role: 'assistant',
      content: message.content === '' ? null : message.content,
      tool_calls: message.toolCalls.map((call) => ({
        id: call.id,
        type: 'function',
        function: { name: call.name, arguments: call.arguments },
      })),
    };
  }
  if (message.role === 'user' && message.images !== undefined && message.images.length > 0) {
    return {
      role: 'user',
      content: [
        { type: 'text', text: message.content },
        ...message.images.map((image) => ({
          type: 'image_url' as const,
          image_url: { url: `data:${image.mediaType};base64,${image.base64}` },
        })),
      ],
    };
  }
  return { role: message.role, content: message.content };
}

// Request parameters a server may refuse, and the option that sets each.
const OPTION_OF_PARAM: Record<string, string> = {
  temperature: 'temperature',
  reasoning_effort: 'reasoningEffort',
  max_completion_tokens: 'maxOutputTokens',
};

/** An OpenAI or OpenAI-compatible chat model, called through the official SDK. */
export class OpenAIModel implements Model {
  /** The configured model name. */
  readonly name: string;
  /** The server, without credentials: what error messages name. */
  readonly endpoint: string;
  readonly #options: z.output<typeof OpenAIModelOptions>;
  readonly #clientOptions: ClientOptions;
  /** Made at the first call, once the SDK is loaded. */
  #client: OpenAI | null = null;
  readonly #secret: string | null;
  readonly #prices: PriceTable;

  /** Whether the price table (`prices` and the built-in one) knows this model's price. */
  get priced(): boolean {
    return priceOf(this.name, this.#prices) !== undefined;
  }

  /** Throws `ConfigurationError` on invalid options, or when no API key is set for a remote server. */
  constructor(options: OpenAIModelOptions) {
    const parsed = OpenAIModelOptions.safeParse(options);
    if (!parsed.success) {
      throw new ConfigurationError(`invalid OpenAIModel options: ${z.prettifyError(parsed.error)}`, {
        cause: parsed.error,
      });
    }
    this.#options = parsed.data;
    this.name = parsed.data.model;
    const baseURL = parsed.data.baseURL ?? (process.env.OPENAI_BASE_URL || DEFAULT_BASE_URL);
    // Only the environment's value is unchecked here: the option was parsed with the same schema.
    const url = BaseUrl.safeParse(baseURL);
    if (!url.success) throw new ConfigurationError(`OPENAI_BASE_URL: ${url.error.issues[0]?.message}`);
    this.endpoint = describeEndpoint(baseURL);
    const apiKey = parsed.data.apiKey ?? (process.env.OPENAI_API_KEY || undefined);
    if (!apiKey && !isLoopbackUrl(baseURL)) {
      throw new ConfigurationError(
        `OPENAI_API_KEY is not set: set it (or pass apiKey) for the model server at ${this.endpoint}; ` +
          'a server that needs no key accepts any value',
      );
    }
    this.#secret = apiKey ?? null;
    this.#prices = { ...DEFAULT_PRICES, ...parsed.data.prices };
    this.#clientOptions = {
      apiKey: apiKey ?? LOCAL_DUMMY_KEY,
      baseURL,
      // `retry` retries instead: the SDK cannot be told to refuse a retry (see openai-retries.ts).
      maxRetries: 0,
      timeout: parsed.data.timeoutMs,
    };
  }

  /**
   * One chat completion. Resolves with the raw answer (refusals and cut-off answers included: the
   * role decides what they mean). Rejects with `ModelTransportError` or `ModelRequestError`, or with
   * the signal's reason when `request.signal` aborts the call.
   */
  async complete(request: ModelRequest): Promise<ModelAnswer> {
    const openai = await loadSdk();
    this.#client ??= new openai.OpenAI(this.#clientOptions);
    const client = this.#client;
    const params = this.#params(request);
    const { signal } = request;
    const completion = await retry(() => client.chat.completions.create(params, { signal }), {
      ...modelRetries(openai),
      maxRetries: this.#options.maxRetries,
      giveUp: (error, attempts) =>
        error instanceof openai.APIUserAbortError && signal?.aborted
          ? (signal.reason ?? error)
          : this.#mapError(error, attempts, openai),
      signal,
    });
    return this.#answer(completion);
  }

  #params(request: ModelRequest): ChatCompletionCreateParamsNonStreaming {
    const { structuredOutput: mode, temperature, maxOutputTokens, reasoningEffort } = this.#options;
    const messages = mode === 'json_schema' ? request.messages : withSchemaInstruction(request, mode);
    const params: ChatCompletionCreateParamsNonStreaming = {
      model: this.name,
      messages: messages.map(toSdkMessage),
    };
    if (request.tools !== undefined && request.tools.length > 0) {
      params.tools = request.tools.map((tool) => ({
        type: 'function',
        function: { name: tool.name, description: tool.description, parameters: tool.parameters },
      }));
    }
    if (temperature !== undefined) params.temperature = temperature;
    if (maxOutputTokens !== undefined) params.max_completion_tokens = maxOutputTokens;
    if (reasoningEffort !== undefined) params.reasoning_effort = reasoningEffort;
    if (mode === 'json_schema') {
      params.response_format = {
        type: 'json_schema',
        json_schema: { name: request.schemaName, schema: request.jsonSchema, strict: true },
      };
    } else if (mode === 'json_object') {
      params.response_format = { type: 'json_object' };
    }
    return params;
  }

  #answer(completion: ChatCompletion): ModelAnswer {
    // A compatible server may send anything with a 200; nothing below trusts the SDK's types.
    const choice = (completion as Partial<ChatCompletion> | null)?.choices?.[0];
    if (!choice?.message) {
      throw new ModelTransportError(
        `the model server at ${this.endpoint} answered without a message (no choices)`,
      );
    }
    let content = choice.message.content ?? null;
    if (content !== null && this.#options.structuredOutput !== 'json_schema') {
      content = FENCED.exec(content)?.[1] ?? content;
    }
    const promptTokens = completion.usage?.prompt_tokens ?? 0;
    const completionTokens = completion.usage?.completion_tokens ?? 0;
    const model = completion.model || this.name;
    // Price the snapshot the server names, else the name configured (a proxy may rename models).
    let cost = costOf(model, promptTokens, completionTokens, this.#prices);
    if (!cost.priced) cost = costOf(this.name, promptTokens, completionTokens, this.#prices);
    const toolCalls = (choice.message.tool_calls ?? []).flatMap((call) =>
      call.type === 'function' && typeof call.function?.name === 'string'
        ? [{ id: call.id, name: call.function.name, arguments: call.function.arguments ?? '' }]
        : [],
    );
    return {
      content,
      refusal: choice.message.refusal ?? null,
      finishReason: (choice.finish_reason as string | null) ?? 'unknown',
      ...(toolCalls.length > 0 ? { toolCalls } : {}),
      model,
      promptTokens,
      completionTokens,
      costUsd: cost.costUsd,
      priced: cost.priced,
    };
  }

  #scrub(text: string): string {
    return this.#secret && this.#secret.length >= 4 ? text.split(this.#secret).join('[redacted]') : text;
  }

  /** A copy of an error chain with the key scrubbed from every message and stack. */
  #scrubbed(error: unknown, depth = 0): Error {
    const source = error instanceof Error ? error : new Error(String(error));
    const copy = new Error(this.#scrub(source.message));
    copy.name = source.name;
    copy.stack = source.stack === undefined ? undefined : this.#scrub(source.stack);
    for (const key of ['status', 'code', 'type', 'param', 'requestID'] as const) {
      const value = (source as unknown as Record<string, unknown>)[key];
      if (typeof value === 'string' || typeof value === 'number') Object.assign(copy, { [key]: value });
    }
    if (source.cause !== undefined && depth < 4) copy.cause = this.#scrubbed(source.cause, depth + 1);
    return copy;
  }

  #mapError(error: unknown, attempts: number, openai: Sdk): Error {
    const [where, model] = [this.endpoint, this.name];
    const tries = `${attempts} attempt${attempts === 1 ? '' : 's'}`;
    const cause = this.#scrubbed(error);
    const transport = (text: string) => new ModelTransportError(this.#scrub(text), { cause });
    const refused = (text: string, status: number) =>
      new ModelRequestError(this.#scrub(text), { cause, status });
    if (error instanceof openai.APIConnectionTimeoutError) {
      return transport(
        `the model server at ${where} did not answer within ${this.#options.timeoutMs} ms (${tries})`,
      );
    }
    if (error instanceof openai.APIConnectionError) {
      // The SDK says only "Connection error."; the reason (ECONNREFUSED, socket closed) is in its causes.
      const reasons: string[] = [];
      for (let e = error.cause; e instanceof Error && reasons.length < 4; e = e.cause)
        reasons.push(e.message);
      return transport(
        `could not reach the model server at ${where} (${tries}): ${reasons.join(': ') || error.message}`,
      );
    }
    if (!(error instanceof openai.APIError) || error.status === undefined) {
      return transport(
        `the call to the model server at ${where} failed: ${(error as Error)?.message ?? String(error)}`,
      );
    }
    const status = error.status;
    const body = error.error as { message?: unknown } | undefined;
    const said = this.#scrub(typeof body?.message === 'string' ? body.message : error.message);
    if (isQuotaExhausted(error)) {
      return refused(
        `the account of the API key has no quota left (429 insufficient_quota) at ${where}: ${said}`,
        status,
      );
    }
    const asked = retryAfterMs(error.headers);
    if (asked !== null && asked > MAX_RETRY_WAIT_MS) {
      const seconds = Math.ceil(asked / 1000);
      return transport(
        `the model server at ${where} answered ${status} and asked to wait ${seconds} s, longer than the ` +
          `${MAX_RETRY_WAIT_MS / 1000} s pge waits; gave up after ${tries}: ${said}`,
      );
    }
    switch (status) {
      case 401:
        return refused(
          `the model server rejected the API key (401): set OPENAI_API_KEY to a valid key for ${where}`,
          status,
        );
      case 403:
        return refused(
          `the model server at ${where} denied access to model "${model}" (403): ${said}; check that the ` +
            "API key's project and organisation may use this model",
          status,
        );
      case 404:
        return refused(
          `model "${model}" was not found at ${where} (404): ${said}; check the model name, and that the ` +
            'base URL includes the API prefix (usually /v1)',
          status,
        );
      case 429:
        return transport(`the model server at ${where} kept rate-limiting (429) after ${tries}: ${said}`);
    }
    if (status === 408 || status === 409 || status >= 500) {
      return transport(`the model server at ${where} failed (${status}) after ${tries}: ${said}`);
    }
    return refused(
      `the model server at ${where} rejected the request for model "${model}" (${status}): ${said}${this.#hint(error, said)}`,
      status,
    );
  }

  /** What to change when a server refuses a parameter, by the parameter it names. */
  #hint(error: APIError, said: string): string {
    const mode = this.#options.structuredOutput;
    if (
      error.param === 'response_format' ||
      /response_format|json_schema|json_object|structured output/i.test(said)
    ) {
      if (mode === 'json_schema') {
        return "; if the server does not support strict JSON Schema output, use structuredOutput: 'json_object' or 'prompt'";
      }
      if (mode === 'json_object')
        return "; if the server does not support JSON mode, use structuredOutput: 'prompt'";
    }
    for (const [param, option] of Object.entries(OPTION_OF_PARAM)) {
      if (error.param === param || said.includes(param))
        return `; the model may not take "${param}": change or drop the ${option} option`;
    }
    return '';
  }
}
