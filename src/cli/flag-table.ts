import type { PgeOptions } from '../api/options.js';
import {
  EXHAUSTION_POLICIES,
  OUTPUT_TYPES,
  REASONING_EFFORTS,
  STRUCTURED_OUTPUT_MODES,
} from '../schemas/setting-values.js';

/**
 * The flags of the CLI, declared once: `parseArgs` options, the help and the conversion of a
 * flag's text into an option value all come from this table, so a flag cannot be parsed without
 * being documented, or documented without being parsed.
 */

/** The options a flag, the environment or a config file can set: every `PgeOptions` name that is plain data. */
export type ConfigKey = Exclude<
  keyof PgeOptions,
  'plannerAgent' | 'generatorAgent' | 'evaluatorAgent' | 'onEvent'
>;

/** How a flag's text becomes a value. */
type FlagKind = 'text' | 'integer' | 'number' | 'duration' | 'choice' | 'threshold' | 'switch';

/** Help sections, in the order the help prints them. */
export const FLAG_GROUPS = {
  model: 'Model',
  harness: 'Harness',
  budget: 'Budgets (the run stops cleanly before exceeding one)',
  output: 'Output',
  nats: 'Distributed (NATS)',
  cli: 'Command line',
} as const;

/** One flag. */
export interface FlagSpec {
  readonly name: string;
  readonly kind: FlagKind;
  /** The option it sets; CLI-only flags (`--json`, `--config`) set none. */
  readonly option?: ConfigKey;
  readonly choices?: readonly string[];
  /** The value's placeholder in the help. */
  readonly value?: string;
  readonly group: keyof typeof FLAG_GROUPS;
  readonly help: string;
}

const MODEL_FLAGS: readonly Omit<FlagSpec, 'group'>[] = [
  {
    name: 'model',
    kind: 'text',
    option: 'modelName',
    value: '<name>',
    help: 'Model for every role (default gpt-4.1)',
  },
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
    name: 'structured-output',
    kind: 'choice',
    option: 'structuredOutput',
    choices: STRUCTURED_OUTPUT_MODES,
    help: 'How answers keep to their schema (default json_schema)',
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
    help: 'Retries of a model call (network, 429, 5xx; default 4)',
  },
  {
    name: 'timeout',
    kind: 'duration',
    option: 'timeoutMs',
    value: '<ms>',
    help: 'Per model call attempt: ms, or 30s, 2m (default 120000)',
  },
];

const HARNESS_FLAGS: readonly Omit<FlagSpec, 'group'>[] = [
  {
    name: 'max-steps',
    kind: 'integer',
    option: 'maxSteps',
    value: '<n>',
    help: 'Most steps a plan may have (default 10)',
  },
  {
    name: 'max-retries',
    kind: 'integer',
    option: 'maxRetriesPerStep',
    value: '<n>',
    help: 'Retries of a step that fails evaluation (default 3)',
  },
  {
    name: 'max-contract-rounds',
    kind: 'integer',
    option: 'maxContractRounds',
    value: '<n>',
    help: 'Contract rounds before one is imposed (default 3)',
  },
  {
    name: 'on-exhausted',
    kind: 'choice',
    option: 'onStepExhausted',
    choices: EXHAUSTION_POLICIES,
    help: 'When a step runs out of retries (default advance)',
  },
  {
    name: 'max-replans',
    kind: 'integer',
    option: 'maxReplans',
    value: '<n>',
    help: 'Replans allowed with --on-exhausted replan (default 1)',
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
    help: 'Threshold of any other criterion (default 6)',
  },
];

const BUDGET_FLAGS: readonly Omit<FlagSpec, 'group'>[] = [
  {
    name: 'max-cost',
    kind: 'number',
    option: 'maxCostUsd',
    value: '<usd>',
    help: 'Most US dollars the run may spend',
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
];

const OUTPUT_FLAGS: readonly Omit<FlagSpec, 'group'>[] = [
  {
    name: 'working-dir',
    kind: 'text',
    option: 'workingDirectory',
    value: '<dir>',
    help: 'Directory of the logs (default: the current one)',
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
    help: 'On stdout: the final artifact (default) or a transcript',
  },
  {
    name: 'json',
    kind: 'switch',
    help: 'Print the result object (lastResult) as JSON on stdout instead',
  },
  {
    name: 'verbose',
    kind: 'switch',
    option: 'verbose',
    help: 'Progress shows every event, model calls included',
  },
];

const NATS_FLAGS: readonly Omit<FlagSpec, 'group'>[] = [
  {
    name: 'nats',
    kind: 'text',
    value: '<url>',
    help: 'Run through a deployment of pge workers on this NATS server (also: NATS_URL)',
  },
];

const CLI_FLAGS: readonly Omit<FlagSpec, 'group'>[] = [
  {
    name: 'config',
    kind: 'text',
    value: '<file>',
    help: 'Config file to read instead of ./pge.config.json',
  },
];

/** Every flag of `run`, `batch` and `config`, in help order. */
export const FLAGS: readonly FlagSpec[] = [
  ...MODEL_FLAGS.map((f) => ({ ...f, group: 'model' as const })),
  ...HARNESS_FLAGS.map((f) => ({ ...f, group: 'harness' as const })),
  ...BUDGET_FLAGS.map((f) => ({ ...f, group: 'budget' as const })),
  ...OUTPUT_FLAGS.map((f) => ({ ...f, group: 'output' as const })),
  ...NATS_FLAGS.map((f) => ({ ...f, group: 'nats' as const })),
  ...CLI_FLAGS.map((f) => ({ ...f, group: 'cli' as const })),
];

/** The flags a command accepts. */
export function flagsFor(command: 'run' | 'batch' | 'config' | 'demo'): readonly FlagSpec[] {
  // The demo's model is built in: flags that configure a model server or a config file do not apply.
  if (command === 'demo')
    return FLAGS.filter((f) => f.group !== 'model' && f.group !== 'cli' && f.group !== 'nats');
  return command === 'run' ? FLAGS : FLAGS.filter((f) => f.group !== 'nats');
}
