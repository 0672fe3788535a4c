import { z } from 'zod';
import {
  APPROVAL_GATES,
  APPROVAL_TIMEOUT_POLICIES,
  DUPLICATE_WINDOW_MS,
  EXHAUSTION_POLICIES,
  OPTION_DEFAULTS,
  OUTPUT_TYPES,
  REASONING_EFFORTS,
  STRUCTURED_OUTPUT_MODES,
} from './setting-values.js';

/**
 * Settings shared by the library's options (`PgeOptionsSchema`), the model client
 * (`OpenAIModelOptions`), run submissions on NATS and the CLI: each enum and each settings shape
 * is declared here once and composed there; a run's own settings are in `run-settings.ts`. Error messages name the option, in the reference's
 * words where it has them ("maxSteps must be >= 1, got 0").
 */

/** When a step runs out of retries: `advance` (the step fails, the run goes on), `abort` or `replan`. */
export const ExhaustionPolicy = z.enum(EXHAUSTION_POLICIES);
export type ExhaustionPolicy = z.infer<typeof ExhaustionPolicy>;

/** A point where a run waits for a person's approval (`--approve plan,contract,step`). */
export const ApprovalGate = z.enum(APPROVAL_GATES);
export type ApprovalGate = z.infer<typeof ApprovalGate>;

/** What a gate's deadline does when no one decided (`approvalTimeoutMs`). */
export const ApprovalTimeoutPolicy = z.enum(APPROVAL_TIMEOUT_POLICIES);
export type ApprovalTimeoutPolicy = z.infer<typeof ApprovalTimeoutPolicy>;

/** `reasoning_effort`, sent only when set: models without reasoning refuse it. */
export const ReasoningEffort = z.enum(REASONING_EFFORTS);
export type ReasoningEffort = z.infer<typeof ReasoningEffort>;

/** How an answer is held to its schema. */
export const StructuredOutputMode = z.enum(STRUCTURED_OUTPUT_MODES);
export type StructuredOutputMode = z.infer<typeof StructuredOutputMode>;

/** What `run()` returns. */
export const OutputType = z.enum(OUTPUT_TYPES);
export type OutputType = z.infer<typeof OutputType>;

// A timer's longest delay in Node; a longer one fires at once (with a warning) instead.
export const MAX_TIMER_MS = 2 ** 31 - 1;

const isHttpUrl = (text: string) => URL.canParse(text) && /^https?:$/.test(new URL(text).protocol);

/**
 * An OpenAI-compatible endpoint. `new URL('localhost:8000')` parses (as the scheme `localhost:`)
 * and `127.0.0.1:8000` does not parse at all, so the scheme is checked, and the message shows the
 * URL the user most likely meant.
 */
export const BaseUrl = z.string().refine(isHttpUrl, {
  error: (issue) => {
    const given = String(issue.input);
    const meant = /^[a-z][a-z0-9+.-]*:\/\//i.test(given) ? 'http://127.0.0.1:8000/v1' : `http://${given}`;
    return `baseURL must be an http:// or https:// URL, such as ${meant}; got "${given}"`;
  },
});

/** USD per million input (prompt) and output (completion, reasoning included) tokens of one model. */
export const ModelPrice = z.strictObject({
  inputPerMTok: z.number().min(0),
  outputPerMTok: z.number().min(0),
});
export type ModelPrice = z.infer<typeof ModelPrice>;

/** Prices by model name; a name also prices its dated snapshots (`gpt-4o` prices `gpt-4o-2024-08-06`). */
export const PriceTable = z.record(z.string(), ModelPrice);
export type PriceTable = z.infer<typeof PriceTable>;

/** Settings of a role's model that may differ per role (`roleSettings`), else shared by all roles. */
export const RoleModelSettings = z.strictObject({
  temperature: z.number().min(0).max(2).optional(),
  /** Sent as `max_completion_tokens` (reasoning tokens count against it). */
  maxOutputTokens: z.number().int().positive().optional(),
  reasoningEffort: ReasoningEffort.optional(),
});
export type RoleModelSettings = z.infer<typeof RoleModelSettings>;

/** Settings of the model client that every role shares. */
export const ModelClientSettings = z.strictObject({
  /** Defaults to `OPENAI_BASE_URL`, else `https://api.openai.com/v1`. */
  baseURL: BaseUrl.optional(),
  structuredOutput: StructuredOutputMode.default(OPTION_DEFAULTS.structuredOutput),
  /** Retries after the first attempt, done by the SDK. */
  maxRetries: z.number().int().min(0).max(10).default(OPTION_DEFAULTS.maxRetries),
  /** Per attempt, not per call: a call may take `(maxRetries + 1) × timeoutMs` plus the waits. */
  timeoutMs: z.number().int().positive().default(OPTION_DEFAULTS.timeoutMs),
  /** Prices by model name, added to (and overriding) the built-in table. */
  prices: PriceTable.optional(),
});

/**
 * Limits of each JetStream stream of a NATS deployment (`PGE_EVENTS`, `PGE_WORK`, `PGE_RESULTS`);
 * 0 is no limit. Past either one the server discards the stream's oldest messages, so a run's
 * events stay in the stream (for followers, and to tell a reused run id) as long as both allow.
 * `pge worker` applies them (flags, config file), as does `NatsBus.connect`; the embedded runtime
 * has no streams and ignores them.
 */
export const StreamLimits = z.strictObject({
  streamMaxAgeMs: z
    .number()
    .int({ error: 'streamMaxAgeMs must be a whole number of milliseconds' })
    .refine((ms) => ms === 0 || ms >= DUPLICATE_WINDOW_MS, {
      error: (issue) =>
        `streamMaxAgeMs must be 0 (no limit) or at least ${DUPLICATE_WINDOW_MS} (the duplicate window), got ${String(issue.input)}`,
    }),
  streamMaxBytes: z
    .number()
    .int({ error: 'streamMaxBytes must be a whole number of bytes' })
    .min(0, { error: (issue) => `streamMaxBytes must be >= 0 (0: no limit), got ${String(issue.input)}` }),
  /**
   * How many servers of a JetStream cluster keep each of pge's streams and its KV bucket (1, 3 or
   * 5; 1 on a single server). A new stream is made with it; an existing one with another count is
   * a configuration error, never silently taken. Left out, a new stream has 1 and an existing one
   * is taken as it is.
   */
  replicas: z
    .number()
    .int({ error: 'replicas must be a whole number' })
    .min(1, { error: (issue) => `replicas must be from 1 to 5, got ${String(issue.input)}` })
    .max(5, { error: (issue) => `replicas must be from 1 to 5, got ${String(issue.input)}` }),
});
export type StreamLimits = z.infer<typeof StreamLimits>;

/**
 * Settings of a client that follows a run of a distributed deployment (`pge run --nats`,
 * `pge follow`); a run in this process does not read them.
 */
export const FollowSettings = z.strictObject({
  /**
   * Milliseconds without a new event of the run after which the follower gives up (exit 3) and says
   * how to follow again. The run is not stopped. No event comes while a model call runs, so this
   * should exceed the longest call.
   */
  followTimeoutMs: z
    .number()
    .int({ error: 'followTimeoutMs must be a whole number of milliseconds' })
    .positive({ error: 'followTimeoutMs must be > 0' })
    .default(OPTION_DEFAULTS.followTimeoutMs),
  /**
   * Milliseconds for which a submission (`pge run --nats`) is sent again, under the same run id,
   * while no coordinator answers it or the cluster cannot (a server lost, JetStream electing a
   * leader); then the client gives up (exit 3). A coordinator answers a submission it already
   * started with that run, so the run starts once.
   */
  submitTimeoutMs: z
    .number()
    .int({ error: 'submitTimeoutMs must be a whole number of milliseconds' })
    .positive({ error: 'submitTimeoutMs must be > 0' })
    .default(OPTION_DEFAULTS.submitTimeoutMs),
});
