/**
 * The values settings may take and their defaults, declared once. The zod schemas of
 * `settings.ts` and `domain.ts` are built from these lists; the CLI's flag table and help read
 * them directly. This module imports nothing, so that `pge --help` and a usage error answer
 * without loading zod (loading it costs several times what the rest of the CLI's startup does).
 */

/** What happens when a step runs out of retries: go on, fail the run, or plan again. */
export const EXHAUSTION_POLICIES = ['advance', 'abort', 'replan'] as const;

/** Where a run may wait for a person's decision: its plan, each step's contract, each step's passing result. */
export const APPROVAL_GATES = ['plan', 'contract', 'step'] as const;

/** What a gate's deadline does when no one decided: approve, reject, or stop the run. */
export const APPROVAL_TIMEOUT_POLICIES = ['approve', 'reject', 'stop'] as const;

/** `reasoning_effort` values of OpenAI's reasoning models. */
export const REASONING_EFFORTS = ['minimal', 'low', 'medium', 'high'] as const;

/** How an answer is held to its schema: strict JSON Schema, JSON mode plus the schema in the prompt, or the prompt alone. */
export const STRUCTURED_OUTPUT_MODES = ['json_schema', 'json_object', 'prompt'] as const;

/** What `run()` returns: the transcript in one of the reference's shapes, or the assembled artifact. */
export const OUTPUT_TYPES = ['dict', 'str', 'list', 'final', 'json', 'yaml'] as const;

/** The roles that call a model. */
export const ROLES = ['planner', 'generator', 'evaluator'] as const;

/** The model calls of a run, in the order a step makes them; each names the schema of its answer. */
export const PHASES = ['plan', 'contract', 'contract_review', 'work', 'evaluation'] as const;

/**
 * Ids that travel inside NATS subjects and durable names (run ids, step ids, subject tokens):
 * letters, digits, `-` and `_`, so never `.`, `*`, `>` or white space.
 */
export const ID_PATTERN = /^[A-Za-z0-9_-]+$/;

/**
 * Within this window JetStream stores a message re-sent with the same `Nats-Msg-Id` once. A
 * stream's `max_age` may not be shorter (the server refuses it), so `streamMaxAgeMs` is at least this.
 */
export const DUPLICATE_WINDOW_MS = 2 * 60_000;

/**
 * The defaults of the library's options (`PgeOptionsSchema`) that have one. The CLI's help prints
 * them from here; the CLI's own defaults, where they differ, are in `src/cli/defaults.ts`.
 */
export const OPTION_DEFAULTS = {
  modelName: 'gpt-4.1',
  maxSteps: 10,
  maxRetriesPerStep: 3,
  maxContractRounds: 3,
  onStepExhausted: 'advance',
  maxReplans: 1,
  maxParallelSteps: 4,
  fallbackThreshold: 6,
  outputType: 'dict',
  maxRepairs: 2,
  structuredOutput: 'json_schema',
  maxRetries: 4,
  timeoutMs: 120_000,
  /**
   * Above what a worker with the defaults can take for one request: (maxRepairs + 1) answers, each
   * up to (maxRetries + 1) tries of timeoutMs.
   */
  callTimeoutMs: 30 * 60_000,
  maxTaskBytes: 256 * 1024,
  streamMaxAgeMs: 30 * 24 * 3_600_000,
  streamMaxBytes: 1024 ** 3,
  followTimeoutMs: 600_000,
  submitTimeoutMs: 60_000,
  onApprovalTimeout: 'stop',
} as const satisfies {
  onStepExhausted: (typeof EXHAUSTION_POLICIES)[number];
  onApprovalTimeout: (typeof APPROVAL_TIMEOUT_POLICIES)[number];
  outputType: (typeof OUTPUT_TYPES)[number];
  structuredOutput: (typeof STRUCTURED_OUTPUT_MODES)[number];
  [option: string]: string | number;
};

/**
 * Milliseconds a message for a JetStream stream is sent again while the server does not
 * acknowledge it, before its publish fails (`NatsBus` option `publishRetryMs`, `pge worker
 * --publish-retry`). It stays within the streams' 2-minute duplicate window, so a late copy is
 * still recognised as one.
 */
export const DEFAULT_PUBLISH_RETRY_MS = 60_000;

/** Requests one role worker (`createRoleWorker`) handles at once: model calls are I/O-bound. */
export const DEFAULT_WORKER_CONCURRENCY = 16;

/** The directory of the working directory that holds runs' workspaces, one per run id. */
export const WORKSPACES_DIR = 'workspaces';
