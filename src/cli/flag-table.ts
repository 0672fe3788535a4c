import type { PgeOptions } from '../api/options.js';
import {
  APPROVAL_GATES,
  APPROVAL_TIMEOUT_POLICIES,
  EXHAUSTION_POLICIES,
  OUTPUT_TYPES,
  REASONING_EFFORTS,
  STRUCTURED_OUTPUT_MODES,
} from '../schemas/setting-values.js';

/**
 * The flags of the CLI, declared once: each command's commander options are declared from this
 * table (and its second half, the flags of single commands in `command-flags.ts`; see
 * `program.ts`), so a flag cannot be parsed without being documented, or documented without
 * being parsed. Choices and defaults come from the settings of `src/schemas` (their zod-free half,
 * so that the help loads fast).
 */

/** The commands of `pge`. */
export type Command =
  | 'run'
  | 'demo'
  | 'plan'
  | 'resume'
  | 'batch'
  | 'config'
  | 'graph'
  | 'replay'
  | 'fork'
  | 'continue'
  | 'runs'
  | 'approvals'
  | 'approve'
  | 'cancel'
  | 'worker'
  | 'dashboard'
  | 'follow'
  | 'nats-config';

/** The options a flag, the environment or a config file can set: every `PgeOptions` name that is plain data. */
export type ConfigKey = Exclude<
  keyof PgeOptions,
  'plannerAgent' | 'generatorAgent' | 'evaluatorAgent' | 'onEvent' | 'tracer'
>;

/**
 * How a flag's text becomes a value. `integer` is a whole number >= 0 (every integer flag is a
 * count, a limit or a port); `duration` is milliseconds, `size` bytes, each with an optional unit;
 * `threshold` and `price` are repeatable `<key>=<value>` pairs; `choices` is a comma-separated subset of
 * the flag's choices.
 */
export type FlagKind =
  | 'text'
  | 'integer'
  | 'number'
  | 'duration'
  | 'size'
  | 'choice'
  | 'choices'
  | 'threshold'
  | 'price'
  | 'mcp'
  | 'switch';

/** Help sections, in the order the help prints them. */
export const FLAG_GROUPS = {
  model: 'Model',
  harness: 'Harness',
  budget: 'Budgets (checked before each request: the run stops rather than make one that breaks one)',
  output: 'Output',
  nats: 'Distributed (NATS)',
  cli: 'Command line',
} as const;

/** One flag. */
export interface FlagSpec {
  readonly name: string;
  readonly kind: FlagKind;
  /** The option it sets; flags that only steer the command (`--json`, `--role`) set none. */
  readonly option?: ConfigKey;
  readonly choices?: readonly string[];
  /** The value's placeholder in the help. */
  readonly value?: string;
  readonly group: keyof typeof FLAG_GROUPS;
  /** What it does. The help adds the option's default. */
  readonly help: string;
  /** Given more than once, it keeps every value (threshold and price flags always do). */
  readonly repeatable?: boolean;
  /** A switch that turns its option off (`--no-tools`) rather than on. */
  readonly turnsOff?: true;
  /** The least value of an `integer` flag that sets no option (default 0; an option's schema says its own). */
  readonly min?: number;
}

/** Flags of one help section. */
export const inGroup = (group: FlagSpec['group'], specs: readonly Omit<FlagSpec, 'group'>[]): FlagSpec[] =>
  specs.map((spec) => ({ ...spec, group }));

const MODEL_FLAGS = inGroup('model', [
  { name: 'model', kind: 'text', option: 'modelName', value: '<name>', help: 'Model for every role' },
  {
    name: 'planner-model',
    kind: 'text',
    option: 'plannerModelName',
    value: '<name>',
    help: "Planner's model (default: --model)",
  },
  {
    name: 'generator-model',
    kind: 'text',
    option: 'generatorModelName',
    value: '<name>',
    help: "Generator's model (default: --model)",
  },
  {
    name: 'evaluator-model',
    kind: 'text',
    option: 'evaluatorModelName',
    value: '<name>',
    help: "Evaluator's model (default: --model)",
  },
  {
    name: 'base-url',
    kind: 'text',
    option: 'baseURL',
    value: '<url>',
    help: 'OpenAI-compatible endpoint, e.g. http://localhost:11434/v1',
  },
  {
    name: 'price',
    kind: 'price',
    option: 'prices',
    value: '<model>=<in>,<out>',
    help: 'Price of a model in USD per million input and output tokens, for cost and --max-cost; repeatable',
  },
  {
    name: 'structured-output',
    kind: 'choice',
    option: 'structuredOutput',
    choices: STRUCTURED_OUTPUT_MODES,
    help: 'How answers keep to their schema',
  },
  {
    name: 'temperature',
    kind: 'number',
    option: 'temperature',
    value: '<0-2>',
    help: 'Sampling temperature',
  },
  {
    name: 'max-output-tokens',
    kind: 'integer',
    option: 'maxOutputTokens',
    value: '<n>',
    help: 'Token limit of one answer',
  },
  {
    name: 'reasoning-effort',
    kind: 'choice',
    option: 'reasoningEffort',
    choices: REASONING_EFFORTS,
    help: 'Reasoning effort, for models that take it',
  },
  {
    name: 'max-model-retries',
    kind: 'integer',
    option: 'maxRetries',
    value: '<n>',
    help: 'Retries of a model call: network, 429, 5xx',
  },
  {
    name: 'timeout',
    kind: 'duration',
    option: 'timeoutMs',
    value: '<ms>',
    help: 'Per model call attempt: ms, or 30s, 2m',
  },
]);

/** The roles whose models get the tools of an MCP server each `--…mcp` flag names. */
export const MCP_FLAG_ROLES: Readonly<Record<string, readonly ('generator' | 'evaluator')[]>> = {
  mcp: ['generator', 'evaluator'],
  'generator-mcp': ['generator'],
  'evaluator-mcp': ['evaluator'],
};

const HARNESS_FLAGS = inGroup('harness', [
  {
    name: 'rubric',
    kind: 'text',
    option: 'criteria',
    value: '<file.json>',
    help: 'A fixed rubric the planner may not change: a JSON array of criteria (name, weight, description, threshold)',
  },
  ...Object.entries(MCP_FLAG_ROLES).map(
    ([name, roles]): Omit<FlagSpec, 'group'> => ({
      name,
      kind: 'mcp',
      option: 'mcpServers',
      value: '<name>=<command …|url>',
      repeatable: true,
      help: `An MCP server whose tools the ${roles.join(' and ')} may call: a command speaking MCP on stdio, or a streamable HTTP URL`,
    }),
  ),
  {
    name: 'approve',
    kind: 'choices',
    option: 'approve',
    choices: APPROVAL_GATES,
    help: "Gates where the run waits for a person's decision, comma-separated: asked on the terminal; on NATS, given with pge approve",
  },
  {
    name: 'approval-timeout',
    kind: 'duration',
    option: 'approvalTimeoutMs',
    value: '<ms>',
    help: 'How long a gate waits for a decision, in ms or with s/m/h; then --on-approval-timeout applies (default: as long as it takes)',
  },
  {
    name: 'on-approval-timeout',
    kind: 'choice',
    option: 'onApprovalTimeout',
    choices: APPROVAL_TIMEOUT_POLICIES,
    help: 'What a gate does when no one decided by its deadline: approve, reject, or stop the run',
  },
  {
    name: 'validate',
    kind: 'text',
    option: 'validators',
    value: '<command>',
    repeatable: true,
    help: "A check of each attempt's work, run in the run's workspace with its output on stdin; a non-zero exit fails the attempt before evaluation; repeatable",
  },
  {
    name: 'max-steps',
    kind: 'integer',
    option: 'maxSteps',
    value: '<n>',
    help: 'Most steps a plan may have',
  },
  {
    name: 'max-retries',
    kind: 'integer',
    option: 'maxRetriesPerStep',
    value: '<n>',
    help: 'Retries of a step that fails evaluation',
  },
  {
    name: 'max-contract-rounds',
    kind: 'integer',
    option: 'maxContractRounds',
    value: '<n>',
    help: 'Contract rounds before one is imposed',
  },
  {
    name: 'on-exhausted',
    kind: 'choice',
    option: 'onStepExhausted',
    choices: EXHAUSTION_POLICIES,
    help: 'When a step runs out of retries',
  },
  {
    name: 'max-replans',
    kind: 'integer',
    option: 'maxReplans',
    value: '<n>',
    help: "Replans allowed: of a step exhausted under --on-exhausted replan, or of one the evaluator finds the plan's fault",
  },
  {
    name: 'parallel',
    kind: 'integer',
    option: 'maxParallelSteps',
    value: '<n>',
    help: "Steps that may run side by side, along the plan's dependencies (1: one at a time, in plan order)",
  },
  {
    name: 'threshold',
    kind: 'threshold',
    option: 'defaultThresholds',
    value: '<name>=<1-10>',
    help: 'Threshold of a criterion the plan leaves open; repeatable',
  },
  {
    name: 'fallback-threshold',
    kind: 'number',
    option: 'fallbackThreshold',
    value: '<1-10>',
    help: 'Threshold of any other criterion',
  },
  {
    name: 'call-timeout',
    kind: 'duration',
    option: 'callTimeoutMs',
    value: '<ms>',
    help: 'Deadline of each model call, retries and repairs included; a call past it fails',
  },
  {
    name: 'max-task-bytes',
    kind: 'size',
    option: 'maxTaskBytes',
    value: '<bytes>',
    help: 'Longest task taken, in UTF-8 bytes (or 512K, 1M); a longer one is refused before anything starts',
  },
]);

const BUDGET_FLAGS = inGroup('budget', [
  {
    name: 'max-cost',
    kind: 'number',
    option: 'maxCostUsd',
    value: '<usd>',
    help: "Most US dollars the run may spend; each model needs a price (OpenAI's are built in, else --price)",
  },
  {
    name: 'max-tokens',
    kind: 'integer',
    option: 'maxTokens',
    value: '<n>',
    help: 'Most tokens, prompt and completion, the run may use',
  },
  {
    name: 'max-duration',
    kind: 'duration',
    option: 'maxDurationMs',
    value: '<ms>',
    help: 'Longest the run may take, in ms or with s/m/h',
  },
]);

const OUTPUT_FLAGS = inGroup('output', [
  {
    name: 'working-dir',
    kind: 'text',
    option: 'workingDirectory',
    value: '<dir>',
    help: "Directory of the logs and of runs' workspaces, workspaces/<runId> (default: the current one)",
  },
  {
    name: 'log',
    kind: 'text',
    option: 'sharedStatePath',
    value: '<path>',
    help: 'Log file (default <dir>/pge_shared_state_<runId>.md); never overwritten',
  },
  {
    name: 'output-type',
    kind: 'choice',
    option: 'outputType',
    choices: OUTPUT_TYPES,
    help: 'On stdout: the final artifact, or the transcript in one of the other shapes',
  },
  { name: 'json', kind: 'switch', help: 'Print the result object (lastResult) as JSON on stdout instead' },
  {
    name: 'verbose',
    kind: 'switch',
    option: 'verbose',
    help: 'Progress shows every event, model calls included',
  },
  {
    name: 'no-images',
    kind: 'switch',
    option: 'images',
    turnsOff: true,
    help: "Show the evaluator no images from the run's workspace",
  },
  {
    name: 'no-tools',
    kind: 'switch',
    option: 'tools',
    turnsOff: true,
    help: "No workspace tools: the generator's model neither reads nor writes files, the evaluator's reads none",
  },
]);

/** `--creds <file>`: the credential of every command that connects to NATS. */
export const CREDS_FLAG: FlagSpec = {
  name: 'creds',
  kind: 'text',
  group: 'nats',
  value: '<file>',
  help: "NATS credentials: a role's .creds file, as 'pge nats-config' writes them (also: NATS_CREDS)",
};

const NATS_FLAGS = inGroup('nats', [
  {
    name: 'nats',
    kind: 'text',
    repeatable: true,
    value: '<url>',
    help: 'Run through a deployment of pge workers on this NATS server; repeatable for the servers of a cluster (also: NATS_URL). Flags of the workers (models, tools, --validate, --log, --working-dir) are refused',
  },
  CREDS_FLAG,
  {
    name: 'follow-timeout',
    kind: 'duration',
    option: 'followTimeoutMs',
    value: '<ms>',
    help: 'With --nats: stop following a run that shows no new event for this long (exit 3; the run goes on); ms, or 30s, 10m',
  },
  {
    name: 'submit-timeout',
    kind: 'duration',
    option: 'submitTimeoutMs',
    value: '<ms>',
    help: 'With --nats: send the submission again (same run id, started once) while no coordinator answers or a server is lost, for up to this long, then exit 3; ms, or 30s, 2m',
  },
]);

/**
 * Flags of `pge worker` that set options of a NATS deployment: the limits of its JetStream streams,
 * applied by every worker (give them all the same, e.g. in a config file).
 */
export const DEPLOYMENT_FLAGS: readonly FlagSpec[] = inGroup('nats', [
  {
    name: 'stream-max-age',
    kind: 'duration',
    option: 'streamMaxAgeMs',
    value: '<ms>',
    help: 'Oldest message a pge stream keeps, in ms or with s/m/h/d (0: no limit, else at least 2m)',
  },
  {
    name: 'stream-max-bytes',
    kind: 'size',
    option: 'streamMaxBytes',
    value: '<bytes>',
    help: 'Most bytes each pge stream keeps, or with K/M/G; the oldest messages go first (0: no limit)',
  },
  {
    name: 'replicas',
    kind: 'integer',
    option: 'replicas',
    value: '<n>',
    help: 'Servers of a JetStream cluster that keep each pge stream and the run-lease bucket: 1, 3 or 5; an existing stream with another count is refused',
  },
]);

const CLI_FLAGS = inGroup('cli', [
  { name: 'config', kind: 'text', value: '<file>', help: 'Config file to read instead of ./pge.config.json' },
]);

/**
 * `--plan` of `run` and `demo`: the plan to run instead of asking the planner, a plan document or a
 * pge log (its latest plan), read by the CLI (`readPlanFile`), as `--rubric`'s file is.
 */
export const PLAN_FLAG: FlagSpec = {
  name: 'plan',
  kind: 'text',
  option: 'plan',
  value: '<file>',
  group: 'harness',
  help: "Run this plan instead of asking the planner: a plan document (pge plan --out) or a pge log (its latest plan); its task is the run's unless one is given, its rubric unless --rubric is",
};

/** The flags that configure a run: every flag of `run`, in help order. */
export const FLAGS: readonly FlagSpec[] = [
  ...MODEL_FLAGS,
  ...HARNESS_FLAGS,
  ...BUDGET_FLAGS,
  ...OUTPUT_FLAGS,
  ...NATS_FLAGS,
  ...CLI_FLAGS,
];

/** Every flag that sets an option, whichever command takes it. */
export const OPTION_FLAGS: readonly FlagSpec[] = [...FLAGS, PLAN_FLAG, ...DEPLOYMENT_FLAGS].filter(
  (flag) => flag.option !== undefined,
);
