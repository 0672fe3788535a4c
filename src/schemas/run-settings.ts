import { z } from 'zod';
import { Criterion, checkUniqueCriteria } from './domain.js';
import { GivenPlan } from './plan-document.js';
import { ApprovalGate, ApprovalTimeoutPolicy, ExhaustionPolicy, MAX_TIMER_MS } from './settings.js';

/**
 * The settings of one run, declared once: `RunSettings` is what a run is started with, what its
 * `run.started` records and what its charts read, passed whole from the edge that made it to the
 * charts. The options that set it (the library's options, flags, a config file, a submission's
 * overrides) name a few of them otherwise (`maxCostUsd` for `budgets.maxCostUsd`,
 * `approvalTimeoutMs` for `approvalDeadline.timeoutMs`): `RunSettingOptions`, made of the same
 * fields, and `runSettingsOf`, the one place that turns those into these. Error messages name the
 * option, in the reference's words where it has them ("maxSteps must be >= 1, got 0").
 */

const atLeast = (name: string, min: number) =>
  z
    .number()
    .int()
    .min(min, { error: (issue) => `${name} must be >= ${min}, got ${String(issue.input)}` });

const score = (name: string) =>
  z
    .number({ error: `${name} must be a number` })
    .min(1, { error: `${name} must be between 1 and 10` })
    .max(10, { error: `${name} must be between 1 and 10` });

const wholeMs = (name: string) =>
  z
    .number()
    .int({ error: `${name} must be a whole number of milliseconds` })
    .positive({ error: `${name} must be > 0` });

// Past the timer's limit a deadline would fire at once: options refuse it.
const timerMs = (name: string) =>
  wholeMs(name).max(MAX_TIMER_MS, { error: `${name} must be at most 2147483647 (24.8 days)` });

/** The bounds of a run, which every run records. */
const bounds = {
  maxSteps: atLeast('maxSteps', 1),
  maxRetriesPerStep: atLeast('maxRetriesPerStep', 0),
  maxContractRounds: atLeast('maxContractRounds', 1),
  onStepExhausted: ExhaustionPolicy,
  maxReplans: atLeast('maxReplans', 0),
  /** Steps that may run side by side, along the plan's dependencies (`--parallel`); 1: one at a time. */
  maxParallelSteps: atLeast('maxParallelSteps', 1),
};

/** Thresholds by criterion name, for criteria the plan leaves without one. */
const DefaultThresholds = z.record(z.string(), score('a default threshold'));
const FallbackThreshold = score('fallbackThreshold');

/**
 * A fixed, hand-authored rubric (`--rubric rubric.json`): the criteria every step is judged by,
 * which the planner may not change.
 */
const FixedCriteria = z
  .array(Criterion)
  .min(1, { error: 'criteria needs at least one criterion' })
  .superRefine((criteria, ctx) => checkUniqueCriteria(criteria, ctx));

/**
 * Where the run waits for a person's decision (`--approve`): its plan, each step's contract, each
 * step's passing result. A rejection sends the plan back to the planner, the contract back to
 * negotiation, the result back to the generator, each with the person's reason.
 */
const Gates = z
  .array(ApprovalGate)
  .refine((gates) => new Set(gates).size === gates.length, { error: 'approve names each gate once' });

// Integers because the run's budgets are integers.
const budgetOptions = {
  maxCostUsd: z.number().positive({ error: 'maxCostUsd must be > 0' }),
  maxTokens: z
    .number()
    .int({ error: 'maxTokens must be a whole number' })
    .positive({ error: 'maxTokens must be > 0' }),
  maxDurationMs: wholeMs('maxDurationMs'),
};

/** Budgets the run was started with; `null` is no limit. */
export const Budgets = z.strictObject({
  maxCostUsd: budgetOptions.maxCostUsd.nullable(),
  maxTokens: budgetOptions.maxTokens.nullable(),
  maxDurationMs: budgetOptions.maxDurationMs.nullable(),
});
export type Budgets = z.infer<typeof Budgets>;

/**
 * What a run's acting roles had: the workspace tools, the generator's validators by name, and the
 * run's workspace (an absolute path), where its files and its validators' runs are.
 */
export const RunActing = z.strictObject({
  tools: z.boolean(),
  validators: z.array(z.string()),
  workspace: z.string().min(1),
});
export type RunActing = z.infer<typeof RunActing>;

/**
 * The settings of a run, as its `run.started` records them: what a resume, a replay and a fork read
 * back, and what the charts run by. A setting left at "none" is left out (no fixed rubric, no gate,
 * no deadline, no given plan), so the log holds only what was set. A log written before a setting
 * existed parses to what it meant: its steps ran one at a time (`maxParallelSteps` 1).
 */
export const RunSettings = z.strictObject({
  ...bounds,
  /** Absent in logs written before steps could run side by side, which ran them one at a time. */
  maxParallelSteps: bounds.maxParallelSteps.default(1),
  /**
   * Thresholds by criterion name for criteria the plan leaves open, and the threshold of any other:
   * with them the log holds every setting the charts read, so a resume replays the run exactly.
   * Absent in logs written before they were recorded; a resume then takes them from its own
   * options (and refuses if the plan's recorded thresholds disagree), a replay from the defaults.
   */
  defaultThresholds: DefaultThresholds.optional(),
  fallbackThreshold: FallbackThreshold.optional(),
  /** The fixed rubric, when the run had one; absent: the planner writes the rubric. */
  criteria: FixedCriteria.optional(),
  /** Where the run waits for a person; absent: nowhere. */
  approve: Gates.min(1).optional(),
  budgets: Budgets,
  /**
   * The deadline of each model call, from its request to its result (the worker's own retries and
   * repairs included): a call with no answer by then fails like one its worker gave up on.
   */
  callTimeoutMs: wholeMs('callTimeoutMs'),
  /**
   * How long a gate waits for a decision, and what `policy` does past it: approve, reject, or stop
   * the run. Absent: a gate waits as long as it takes.
   */
  approvalDeadline: z
    .strictObject({ timeoutMs: wholeMs('approvalTimeoutMs'), policy: ApprovalTimeoutPolicy })
    .optional(),
  models: z.strictObject({ planner: z.string(), generator: z.string(), evaluator: z.string() }),
  /**
   * Whether the acting roles had the workspace tools, the generator's validators by name, and
   * the run's workspace, when the process that started the run held its workers (the embedded
   * runtime): a resume must have the same, as it must have the same models. Absent when the
   * run's workers were elsewhere (a run submitted over NATS), and in logs written before they
   * were recorded.
   */
  acting: RunActing.optional(),
  /**
   * The plan to run (`--plan plan.json`, `pge continue`): no planner is asked for the first plan,
   * which gets the checks a planner's gets. Its rubric stands unless `criteria` is given.
   */
  plan: GivenPlan.optional(),
});
export type RunSettings = z.infer<typeof RunSettings>;

/**
 * The run settings as options name them: the library's options of the same names, flags, a config
 * file, and a run submission's overrides (`RunSubmissionOptions`, each optional). Budgets are
 * options of their own, as is a gate's deadline and its policy; null or left out is none.
 */
export const RunSettingOptions = z.strictObject({
  ...bounds,
  defaultThresholds: DefaultThresholds,
  fallbackThreshold: FallbackThreshold,
  maxCostUsd: budgetOptions.maxCostUsd.optional(),
  maxTokens: budgetOptions.maxTokens.optional(),
  maxDurationMs: budgetOptions.maxDurationMs.optional(),
  callTimeoutMs: timerMs('callTimeoutMs'),
  criteria: FixedCriteria.nullable().optional(),
  approve: Gates.optional(),
  approvalTimeoutMs: timerMs('approvalTimeoutMs').nullable().optional(),
  onApprovalTimeout: ApprovalTimeoutPolicy.optional(),
  plan: GivenPlan.nullable().optional(),
});
export type RunSettingOptions = z.infer<typeof RunSettingOptions>;

/**
 * The settings a fork may change from its parent's (`pge fork`, a fork submitted on NATS): the
 * bounds, the thresholds, the budgets and the call deadline; the parent's recorded ones stand for
 * the rest. Each as `run.started` records it (a budget's `null` is no limit).
 */
export const ForkSettings = RunSettings.pick({
  maxRetriesPerStep: true,
  maxContractRounds: true,
  onStepExhausted: true,
  maxReplans: true,
  defaultThresholds: true,
  fallbackThreshold: true,
  callTimeoutMs: true,
})
  .extend(Budgets.shape)
  .partial();
export type ForkSettings = z.infer<typeof ForkSettings>;

/** The options that are settings of the same name and shape, none being left out (`[]`, `null`). */
const SAME_NAMED = Object.keys(RunSettingOptions.shape).filter((name) => name in RunSettings.shape);

const isNone = (value: unknown) =>
  value === undefined || value === null || (Array.isArray(value) && value.length === 0);

/**
 * A run's settings from the options that set them (any object holding them, such as the library's
 * resolved options), with the models its `run.started` names and, when this process holds its
 * workers, what they act with. Parsed, so that they come in the order the log records them.
 */
export function runSettingsOf(
  options: RunSettingOptions,
  run: Pick<RunSettings, 'models' | 'acting'>,
): RunSettings {
  const given = options as Record<string, unknown>;
  const { approvalTimeoutMs, onApprovalTimeout } = options;
  return RunSettings.parse({
    ...Object.fromEntries(SAME_NAMED.flatMap((name) => (isNone(given[name]) ? [] : [[name, given[name]]]))),
    budgets: Object.fromEntries(Object.keys(Budgets.shape).map((name) => [name, given[name] ?? null])),
    ...(isNone(approvalTimeoutMs)
      ? {}
      : { approvalDeadline: { timeoutMs: approvalTimeoutMs, policy: onApprovalTimeout ?? 'stop' } }),
    models: run.models,
    ...(run.acting === undefined ? {} : { acting: run.acting }),
  });
}

/**
 * A fork's settings: its parent's, with the changes a fork may make (`ForkSettings`; a budget's
 * `null` lifts it), and the fork's own models and acting (the parent's acting is not the fork's).
 */
export function forkedSettings(
  parent: RunSettings,
  changes: ForkSettings,
  run: Pick<RunSettings, 'models' | 'acting'>,
): RunSettings {
  const given = Object.entries(changes).filter(([, value]) => value !== undefined);
  const budget = ([name]: [string, unknown]) => name in Budgets.shape;
  const { acting: _, ...kept } = parent;
  return {
    ...kept,
    ...Object.fromEntries(given.filter((entry) => !budget(entry))),
    budgets: { ...parent.budgets, ...Object.fromEntries(given.filter(budget)) },
    models: run.models,
    ...(run.acting === undefined ? {} : { acting: run.acting }),
  };
}
