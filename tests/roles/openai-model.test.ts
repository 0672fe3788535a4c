import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ConfigurationError, ModelRequestError, ModelTransportError } from '../../src/errors.js';
import { pauseMs } from '../../src/retry.js';
import type { ModelRequest } from '../../src/roles/model.js';
import { OpenAIModel, type OpenAIModelOptions } from '../../src/roles/openai-model.js';
import { modelRetries } from '../../src/roles/openai-retries.js';
import { costOf, priceOf } from '../../src/roles/pricing.js';
import { responseSchemaFor } from '../../src/roles/response-schemas.js';
import { type FakeOpenAI, startFakeOpenAI } from '../support/fake-openai-server.js';

// Everything below goes through the real SDK over real HTTP to a scripted local server.

const KEY = 'sk-test-SECRET123456789012345';
const EVALUATION = {
  scores: [{ criterion: 'correctness', score: 8, evidence: 'it runs' }],
  findings: [],
  actionableFeedback: [],
  summary: 'good',
};

let server: FakeOpenAI;
beforeEach(async () => {
  server = await startFakeOpenAI();
});
afterEach(async () => {
  vi.unstubAllEnvs();
  await server.close();
});

function modelFor(options: Partial<OpenAIModelOptions> = {}): OpenAIModel {
  return new OpenAIModel({
    model: 'gpt-4o-mini',
    baseURL: server.url,
    apiKey: KEY,
    maxRetries: 0,
    ...options,
  });
}

const { name: EVALUATION_NAME, jsonSchema: EVALUATION_SCHEMA } = await responseSchemaFor('evaluation');

function evaluationRequest(overrides: Partial<ModelRequest> = {}): ModelRequest {
  return {
    role: 'evaluator',
    phase: 'evaluation',
    schemaName: EVALUATION_NAME,
    jsonSchema: EVALUATION_SCHEMA,
    messages: [
      { role: 'system', content: 'You are the evaluator.' },
      { role: 'user', content: 'Score the artifact.' },
    ],
    ...overrides,
  };
}

async function rejection(promise: Promise<unknown>): Promise<Error> {
  const outcome = await promise.then(
    () => new Error('expected the call to fail, but it succeeded'),
    (error: unknown) => error,
  );
  if (!(outcome instanceof Error) || outcome.message === 'expected the call to fail, but it succeeded')
    throw outcome;
  return outcome;
}

describe('OpenAIModel requests', () => {
  it('sends the schema as strict json_schema under its phase name, and the messages unchanged', async () => {
    server.enqueue({ content: EVALUATION });
    const request = evaluationRequest();
    const answer = await modelFor().complete(request);
    expect(JSON.parse(answer.content ?? '')).toEqual(EVALUATION);
    const [sent] = server.completions();
    expect(sent?.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(sent?.body).toMatchObject({
      model: 'gpt-4o-mini',
      messages: request.messages,
      response_format: { type: 'json_schema', json_schema: { name: 'pge_evaluation', strict: true } },
    });
    expect(sent?.body.response_format.json_schema.schema).toEqual(request.jsonSchema);
    for (const absent of ['temperature', 'max_completion_tokens', 'reasoning_effort', 'stream']) {
      expect(sent?.body).not.toHaveProperty(absent);
    }
  });

  it('sends temperature, max_completion_tokens and reasoning_effort when set', async () => {
    server.enqueue({ content: EVALUATION });
    await modelFor({ temperature: 0.2, maxOutputTokens: 900, reasoningEffort: 'low' }).complete(
      evaluationRequest(),
    );
    expect(server.completions()[0]?.body).toMatchObject({
      temperature: 0.2,
      max_completion_tokens: 900,
      reasoning_effort: 'low',
    });
  });

  it('json_object mode asks for a JSON object and puts the schema in the system message', async () => {
    server.enqueue({ content: EVALUATION });
    const request = evaluationRequest();
    await modelFor({ structuredOutput: 'json_object' }).complete(request);
    const body = server.completions()[0]?.body;
    expect(body.response_format).toEqual({ type: 'json_object' });
    expect(body.messages[0].role).toBe('system');
    expect(body.messages[0].content).toMatch(
      /^You are the evaluator\.\n\nAnswer with a JSON object .*pge_evaluation/,
    );
    expect(body.messages[0].content).toContain(JSON.stringify(request.jsonSchema));
    expect(body.messages[1]).toEqual(request.messages[1]);
    expect(request.messages[0]?.content).toBe('You are the evaluator.');
  });

  it('prompt mode sends no response_format, asks for JSON only and strips a code fence', async () => {
    server.enqueue({ content: `\`\`\`json\n${JSON.stringify(EVALUATION)}\n\`\`\`` });
    const request = evaluationRequest({ messages: [{ role: 'user', content: 'Score the artifact.' }] });
    const answer = await modelFor({ structuredOutput: 'prompt' }).complete(request);
    expect(JSON.parse(answer.content ?? '')).toEqual(EVALUATION);
    const body = server.completions()[0]?.body;
    expect(body).not.toHaveProperty('response_format');
    expect(body.messages).toHaveLength(2);
    expect(body.messages[0].role).toBe('system');
    expect(body.messages[0].content).toMatch(/^Answer with JSON only/);
    expect(body.messages[0].content).toContain(JSON.stringify(request.jsonSchema));
  });

  it('leaves a fence alone in json_schema mode, where the server guarantees JSON', async () => {
    server.enqueue({ content: '```json\n{}\n```' });
    expect((await modelFor().complete(evaluationRequest())).content).toBe('```json\n{}\n```');
  });
});

describe('OpenAIModel with a scripted server', () => {
  it('answers each phase by the schema name it receives', async () => {
    const answers: Record<string, object> = {
      pge_contract_review: { status: 'approved', amendments: [], rationale: 'ok' },
    };
    server.script((body) => ({ content: answers[body.response_format.json_schema.name] ?? EVALUATION }));
    const model = modelFor();
    const review = await responseSchemaFor('contract_review');
    const reviewed = await model.complete(
      evaluationRequest({
        role: 'evaluator',
        phase: 'contract_review',
        schemaName: review.name,
        jsonSchema: review.jsonSchema,
      }),
    );
    expect(review.schema.parse(JSON.parse(reviewed.content ?? ''))).toMatchObject({ status: 'approved' });
    const evaluated = await model.complete(evaluationRequest());
    // An answer without failureKind (a model that ignored it) reads as null: no fault named.
    expect((await responseSchemaFor('evaluation')).schema.parse(JSON.parse(evaluated.content ?? ''))).toEqual(
      {
        ...EVALUATION,
        failureKind: null,
      },
    );
    expect(server.completions().map((r) => r.body.response_format.json_schema.name)).toEqual([
      'pge_contract_review',
      'pge_evaluation',
    ]);
  });

  it('delays an answer by a bare delay step, then answers as the script says', async () => {
    server.script(() => ({ content: EVALUATION }));
    server.enqueue({ delayMs: 200 });
    const started = Date.now();
    const answer = await modelFor().complete(evaluationRequest());
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
    expect(JSON.parse(answer.content ?? '')).toEqual(EVALUATION);
  });

  it('maps a proxy error page to a ModelTransportError, and an unscripted request to a 400', async () => {
    server.enqueue({ status: 502, rawBody: '<html>Bad Gateway</html>' });
    const gateway = await rejection(modelFor().complete(evaluationRequest()));
    expect(gateway).toBeInstanceOf(ModelTransportError);
    expect(gateway.message).toMatch(/failed \(502\) after 1 attempt: .*Bad Gateway/);
    const unscripted = await rejection(modelFor().complete(evaluationRequest()));
    expect(unscripted).toBeInstanceOf(ModelRequestError);
    expect(unscripted.message).toContain('nothing scripted for request #2');
  });
});

describe('OpenAIModel answers', () => {
  it('reports usage, the answering snapshot and its cost', async () => {
    server.enqueue({
      content: EVALUATION,
      model: 'gpt-4o-mini-2024-07-18',
      usage: { prompt_tokens: 1000, completion_tokens: 500 },
    });
    const answer = await modelFor().complete(evaluationRequest());
    expect(answer).toMatchObject({
      model: 'gpt-4o-mini-2024-07-18',
      promptTokens: 1000,
      completionTokens: 500,
    });
    expect(answer.costUsd).toBeCloseTo((1000 * 0.15 + 500 * 0.6) / 1e6, 12);
    expect(answer.finishReason).toBe('stop');
  });

  it('prices with a custom table, and reports 0 for an unknown model or a missing usage', async () => {
    server.enqueue(
      { content: EVALUATION, usage: { prompt_tokens: 2_000_000, completion_tokens: 1_000_000 } },
      { content: EVALUATION, usage: null },
    );
    const local = modelFor({
      model: 'llama-3.1-8b',
      prices: { 'llama-3.1': { inputPerMTok: 1, outputPerMTok: 3 } },
    });
    expect((await local.complete(evaluationRequest())).costUsd).toBe(0);
    const none = await modelFor().complete(evaluationRequest());
    expect(none).toMatchObject({ promptTokens: 0, completionTokens: 0, costUsd: 0 });
    server.enqueue({
      content: EVALUATION,
      usage: { prompt_tokens: 2_000_000, completion_tokens: 1_000_000 },
    });
    const priced = modelFor({
      model: 'llama-3.1',
      prices: { 'llama-3.1': { inputPerMTok: 1, outputPerMTok: 3 } },
    });
    expect((await priced.complete(evaluationRequest())).costUsd).toBe(5);
  });

  it("reports finish_reason 'length' for a cut-off answer", async () => {
    server.enqueue({ content: '{"scores": [', finishReason: 'length' });
    const answer = await modelFor().complete(evaluationRequest());
    expect(answer).toMatchObject({ finishReason: 'length', content: '{"scores": [' });
  });

  it('reports a refusal', async () => {
    server.enqueue({ content: null, refusal: 'I cannot help with that.' });
    const answer = await modelFor().complete(evaluationRequest());
    expect(answer).toMatchObject({ content: null, refusal: 'I cannot help with that.' });
  });
});

describe('OpenAIModel retries (the SDK’s rules, and two refusals of its own)', () => {
  it('waits what retry-after asks after a 429, then answers', async () => {
    server.enqueue(
      { status: 429, headers: { 'retry-after': '1' }, error: { message: 'slow down' } },
      { content: EVALUATION },
    );
    const answer = await modelFor({ maxRetries: 2 }).complete(evaluationRequest());
    expect(JSON.parse(answer.content ?? '')).toEqual(EVALUATION);
    const [first, second] = server.completions();
    expect(server.completions()).toHaveLength(2);
    // The SDK's own first backoff is at most 500 ms: a gap of a second is the header's.
    expect((second?.receivedAt ?? 0) - (first?.receivedAt ?? 0)).toBeGreaterThanOrEqual(950);
  });

  it('gives up on 500s after maxRetries + 1 attempts with a ModelTransportError', async () => {
    const failure = {
      status: 500,
      headers: { 'retry-after-ms': '10' },
      error: { message: 'upstream exploded' },
    };
    server.enqueue(failure, failure, failure, { content: EVALUATION });
    const error = await rejection(modelFor({ maxRetries: 2 }).complete(evaluationRequest()));
    expect(error).toBeInstanceOf(ModelTransportError);
    expect(error.message).toMatch(/failed \(500\) after 3 attempts: upstream exploded/);
    expect(server.completions()).toHaveLength(3);
  });

  it('recovers from a dropped connection', async () => {
    server.enqueue({ dropConnection: true }, { content: EVALUATION });
    const answer = await modelFor({ maxRetries: 1 }).complete(evaluationRequest());
    expect(JSON.parse(answer.content ?? '')).toEqual(EVALUATION);
    expect(server.completions()).toHaveLength(2);
  });

  it('does not wait for a retry-after longer than a minute', async () => {
    server.enqueue({ status: 429, headers: { 'retry-after': '3600' }, error: { message: 'daily limit' } });
    const error = await rejection(modelFor({ maxRetries: 3 }).complete(evaluationRequest()));
    expect(error).toBeInstanceOf(ModelTransportError);
    expect(error.message).toMatch(/asked to wait 3600 s.*gave up after 1 attempt: daily limit/);
    expect(server.completions()).toHaveLength(1);
  });

  it('does not retry an exhausted quota', async () => {
    server.enqueue({
      status: 429,
      error: {
        message: 'You exceeded your current quota.',
        type: 'insufficient_quota',
        code: 'insufficient_quota',
      },
    });
    const error = await rejection(modelFor({ maxRetries: 3 }).complete(evaluationRequest()));
    expect(error).toBeInstanceOf(ModelRequestError);
    expect(error).toMatchObject({ status: 429, retryable: false });
    expect(error.message).toMatch(/no quota left/);
    expect(server.completions()).toHaveLength(1);
  });

  it('times out a silent server with a ModelTransportError', async () => {
    server.enqueue({ delayMs: 2000, content: EVALUATION });
    const started = Date.now();
    const error = await rejection(modelFor({ timeoutMs: 300 }).complete(evaluationRequest()));
    expect(error).toBeInstanceOf(ModelTransportError);
    expect(error.message).toMatch(/did not answer within 300 ms \(1 attempt\)/);
    expect(Date.now() - started).toBeLessThan(1500);
  });

  it('reports an unreachable server with a ModelTransportError', async () => {
    const url = server.url;
    await server.close();
    server = await startFakeOpenAI();
    const error = await rejection(modelFor({ baseURL: url }).complete(evaluationRequest()));
    expect(error).toBeInstanceOf(ModelTransportError);
    expect(error.message).toMatch(
      /could not reach the model server at http:\/\/127\.0\.0\.1:\d+\/v1 \(1 attempt\)/,
    );
  });

  it('rejects with the abort reason when the caller aborts', async () => {
    server.enqueue({ delayMs: 2000, content: EVALUATION });
    const controller = new AbortController();
    const reason = new Error('run stopped: budget');
    setTimeout(() => controller.abort(reason), 100);
    const error = await rejection(modelFor().complete(evaluationRequest({ signal: controller.signal })));
    expect(error).toBe(reason);
    // The HTTP request itself was aborted, not left to run to its end.
    await vi.waitFor(() => expect(server.completions()[0]?.abortedAt).not.toBeNull());
  });

  it('stops waiting between attempts when the caller aborts', async () => {
    server.enqueue({ status: 503, headers: { 'retry-after': '30' }, error: { message: 'busy' } });
    const controller = new AbortController();
    const reason = new Error('run stopped: cancelled');
    setTimeout(() => controller.abort(reason), 200);
    const started = Date.now();
    const model = modelFor({ maxRetries: 3 });
    const error = await rejection(model.complete(evaluationRequest({ signal: controller.signal })));
    expect(error).toBe(reason);
    expect(Date.now() - started).toBeLessThan(5000);
    expect(server.completions()).toHaveLength(1);
  });

  it('obeys the server’s x-should-retry over the status', async () => {
    server.enqueue(
      {
        status: 400,
        headers: { 'x-should-retry': 'true', 'retry-after-ms': '10' },
        error: { message: 'flaky' },
      },
      { content: EVALUATION },
    );
    const answer = await modelFor({ maxRetries: 1 }).complete(evaluationRequest());
    expect(JSON.parse(answer.content ?? '')).toEqual(EVALUATION);
    expect(server.completions()).toHaveLength(2);

    server.reset();
    server.enqueue({
      status: 503,
      headers: { 'x-should-retry': 'false' },
      error: { message: 'gone for good' },
    });
    const error = await rejection(modelFor({ maxRetries: 3 }).complete(evaluationRequest()));
    expect(error.message).toMatch(/failed \(503\) after 1 attempt: gone for good/);
    expect(server.completions()).toHaveLength(1);
  });
});

describe('modelRetries', () => {
  it('backs off as the SDK does: 0.5 s doubling to 8 s, minus up to 25 % jitter', async () => {
    const sdk = await import('openai');
    const failure = new sdk.APIConnectionError({ message: 'socket hang up' });
    for (const [retry, most] of [
      [0, 500],
      [1, 1000],
      [4, 8000],
      [9, 8000],
    ] as const) {
      const wait = pauseMs(failure, retry, modelRetries(sdk)) ?? -1;
      expect(wait).toBeGreaterThanOrEqual(most * 0.75);
      expect(wait).toBeLessThanOrEqual(most);
    }
  });

  it('gives up on what is not worth another try', async () => {
    const sdk = await import('openai');
    const status = (code: number, headers: Record<string, string> = {}, body: object = {}) =>
      sdk.APIError.generate(code, { error: body }, undefined, new Headers(headers));
    const pause = (failure: unknown) => pauseMs(failure, 0, modelRetries(sdk));
    expect(pause(status(400))).toBeNull();
    expect(pause(status(401))).toBeNull();
    expect(pause(status(429, { 'retry-after': '61' }))).toBeNull();
    expect(pause(status(429, {}, { code: 'insufficient_quota' }))).toBeNull();
    expect(pause(new sdk.APIUserAbortError())).toBeNull();
    expect(pause(new Error('not the SDK’s'))).toBeNull();
    expect(pause(status(429, { 'retry-after': '60' }))).toBe(60_000);
    expect(pause(status(409, { 'retry-after-ms': '250' }))).toBe(250);
    expect(pause(status(502, { 'retry-after': 'not a date' }))).toBeLessThanOrEqual(500);
  });
});

describe('OpenAIModel request errors', () => {
  it('maps 401 to a ModelRequestError at once, and never shows the key', async () => {
    server.enqueue({
      status: 401,
      error: {
        message: `Incorrect API key provided: ${KEY}.`,
        type: 'invalid_request_error',
        code: 'invalid_api_key',
      },
    });
    const error = await rejection(modelFor({ maxRetries: 3 }).complete(evaluationRequest()));
    expect(error).toBeInstanceOf(ModelRequestError);
    expect(error).toMatchObject({ status: 401 });
    expect(error.message).toBe(
      `the model server rejected the API key (401): set OPENAI_API_KEY to a valid key for ${server.url}`,
    );
    expect(server.completions()).toHaveLength(1);
    const cause = error.cause as Error;
    expect(cause.message).toContain('Incorrect API key provided: [redacted]');
    for (const text of [
      error.message,
      error.stack,
      String(error.cause),
      cause.stack,
      JSON.stringify(error),
    ]) {
      expect(text).not.toContain(KEY);
      expect(text).not.toContain('SECRET123456789012345');
    }
  });

  it('maps 403 to a permission message', async () => {
    server.enqueue({ status: 403, error: { message: 'Project does not have access to model gpt-4o-mini' } });
    const error = await rejection(modelFor().complete(evaluationRequest()));
    expect(error).toBeInstanceOf(ModelRequestError);
    expect(error.message).toMatch(
      /denied access to model "gpt-4o-mini" \(403\): Project does not have access/,
    );
  });

  it('maps 404 to a message naming the model and the base URL', async () => {
    server.enqueue({
      status: 404,
      error: { message: 'The model `gpt-9` does not exist', code: 'model_not_found' },
    });
    const error = await rejection(modelFor({ model: 'gpt-9' }).complete(evaluationRequest()));
    expect(error).toBeInstanceOf(ModelRequestError);
    expect(error.message).toContain(
      `model "gpt-9" was not found at ${server.url} (404): The model \`gpt-9\` does not exist`,
    );
  });

  it('maps a 400 about response_format to a message that suggests another structuredOutput', async () => {
    server.enqueue({
      status: 400,
      error: {
        message:
          "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.",
        param: 'response_format',
      },
    });
    const error = await rejection(modelFor({ maxRetries: 3 }).complete(evaluationRequest()));
    expect(error).toBeInstanceOf(ModelRequestError);
    expect(error).toMatchObject({ status: 400 });
    expect(error.message).toContain(
      "is not supported with this model.; if the server does not support strict JSON Schema output, use structuredOutput: 'json_object' or 'prompt'",
    );
    expect(server.completions()).toHaveLength(1);
  });

  it('maps a 400 about a parameter to the option that sets it', async () => {
    server.enqueue({
      status: 400,
      error: { message: "Unsupported parameter: 'temperature'", param: 'temperature' },
    });
    const error = await rejection(modelFor({ temperature: 0.5 }).complete(evaluationRequest()));
    expect(error.message).toMatch(/change or drop the temperature option$/);
  });
});

describe('OpenAIModel configuration', () => {
  it('needs a key for a remote server and says which variable to set', () => {
    vi.stubEnv('OPENAI_API_KEY', '');
    vi.stubEnv('OPENAI_BASE_URL', '');
    expect(() => new OpenAIModel({ model: 'gpt-4o' })).toThrow(ConfigurationError);
    expect(() => new OpenAIModel({ model: 'gpt-4o' })).toThrow(
      /^OPENAI_API_KEY is not set: .*https:\/\/api\.openai\.com\/v1/,
    );
  });

  it('takes the key and base URL from the environment', async () => {
    vi.stubEnv('OPENAI_API_KEY', KEY);
    vi.stubEnv('OPENAI_BASE_URL', server.url);
    server.enqueue({ content: EVALUATION });
    await new OpenAIModel({ model: 'gpt-4o' }).complete(evaluationRequest());
    expect(server.completions()[0]?.headers.authorization).toBe(`Bearer ${KEY}`);
  });

  it('calls a loopback server without a key', async () => {
    vi.stubEnv('OPENAI_API_KEY', '');
    server.enqueue({ content: EVALUATION });
    const model = new OpenAIModel({ model: 'local', baseURL: server.url.replace('127.0.0.1', 'localhost') });
    await model.complete(evaluationRequest());
    expect(server.completions()[0]?.headers.authorization).toBe('Bearer not-needed');
  });

  it('refuses unknown and invalid options', () => {
    const unknown = { model: 'gpt-4o', apiKey: KEY, maxRetry: 3 } as unknown as OpenAIModelOptions;
    expect(() => new OpenAIModel(unknown)).toThrow(/maxRetry/);
    expect(() => new OpenAIModel({ model: 'gpt-4o', apiKey: KEY, timeoutMs: -1 })).toThrow(
      ConfigurationError,
    );
    expect(() => new OpenAIModel({ model: 'gpt-4o', apiKey: KEY, baseURL: 'not a url' })).toThrow(
      ConfigurationError,
    );
  });
});

describe('pricing', () => {
  it('matches exact names and dated snapshots, not other models that share a prefix', () => {
    expect(priceOf('gpt-4o-mini-2024-07-18')).toEqual({ inputPerMTok: 0.15, outputPerMTok: 0.6 });
    expect(priceOf('gpt-4o-2024-08-06')).toEqual({ inputPerMTok: 2.5, outputPerMTok: 10 });
    expect(priceOf('GPT-4.1-nano')).toEqual({ inputPerMTok: 0.1, outputPerMTok: 0.4 });
    expect(priceOf('o3-pro')).toBeUndefined();
    expect(priceOf('gpt-4o-audio-preview')).toBeUndefined();
  });

  it('computes USD and says when a model is unpriced', () => {
    expect(costOf('gpt-5', 1_000_000, 1_000_000)).toEqual({ costUsd: 11.25, priced: true });
    expect(costOf('mystery', 10, 10)).toEqual({ costUsd: 0, priced: false });
  });
});
