import {
  type CarriedStep,
  type DependencyArtifact,
  type ErrorInfo,
  type ExhaustionPolicy,
  type Plan,
  type PlanOutline,
  type PlanStep,
  planOfDocument,
  type ReplanContext,
  type ResolvedCriterion,
  type RunCancellation,
  type RunContinuation,
  type RunSettings,
  type RunTotals,
  type StepInFlight,
  ZERO_USAGE,
} from '../schemas/index.js';
import { type RunStatus, STOP_REASON } from '../schemas/run-status.js';
import { type BudgetName, exhaustionPolicy, rubricOf } from './guards.js';
import type { BudgetState, RecordParams, StepInput, StepOutcome } from './types.js';

/**
 * The run machine's input, context and outcome, and the pure functions its transitions build from
 * them: the step's dependencies, the plan outline, the outcome and closing event of each final
 * state. No XState here: `run-machine.ts` wires them into the chart.
 */

/** Input of the run machine: the task, the run's settings whole (`RunSettings`), and when it started. */
export interface RunInput extends RunSettings {
  task: string;
  logPath: string;
  /** The run this one carries on (`pge continue`): the steps it keeps from it pass without running. Absent: none. */
  continues?: RunContinuation | undefined;
  /** Epoch ms the run started (the machine reads no clock). */
  startedAt: number;
}

export type { RunStatus } from '../schemas/run-status.js';

/** Output of the run machine. */
export interface RunOutcome {
  status: RunStatus;
  plan: Plan | null;
  criteria: ResolvedCriterion[];
  /** Every step run, in the order run (a step re-run after a replan appears again). */
  outcomes: StepOutcome[];
  replans: number;
  totals: RunTotals;
  stoppedBy: BudgetName | null;
  error: ErrorInfo | null;
}

/** A person's cancel of the run: who asked, and why (an empty reason is none). */
export interface RunCancelEvent {
  type: 'cancel';
  by: string;
  reason?: string;
}

/** What stops a run from outside: Ctrl-C or SIGTERM (`interrupt`), or a person's `cancel`. */
export type RunStopEvent = { type: 'interrupt'; reason?: string } | RunCancelEvent;

/** Context of the run machine: its input as given, and what the run has done (`StepContext` says why nested). */
export interface RunContext {
  input: RunInput;
  interruptReason: string | null;
  /** Who cancelled the run, and why: set by `cancel`, for the closing event of `cancelled`. */
  cancelled: RunCancellation | null;
  plan: Plan | null;
  criteria: ResolvedCriterion[];
  replans: number;
  replan: ReplanContext | null;
  /** Ids of the current plan's steps started (or skipped, passed before a replan), in that order. */
  scheduled: string[];
  /** Ids of the steps running now (each a `runStep` child actor, `step.<id>`), in start order. */
  running: string[];
  /** Ids of the steps that ran beside another: they report their spend as they go (`step.spent`). */
  company: string[];
  /** The steps that were running as the run left `stepping`, for its closing event. */
  inFlight: StepInFlight[];
  /** A replan a step asked for while others ran: it waits until they have ended. */
  pendingReplan: { reason: ReplanContext['reason']; stepId: string } | null;
  outcomes: StepOutcome[];
  budget: BudgetState;
  stoppedBy: BudgetName | null;
  error: ErrorInfo | null;
}

/**
 * The outcomes a continued run starts with: one per step it keeps, passed on its kept attempt,
 * in the given plan's order (`CarriedStep`). No spend: it was the earlier run's.
 */
export function carriedOutcomes(input: RunInput, budget: BudgetState): StepOutcome[] {
  const carried = input.continues?.carried ?? [];
  const steps = input.plan?.document.steps ?? [];
  return carried.map((c: CarriedStep) => ({
    status: 'passed',
    stepId: c.stepId,
    stepNumber: steps.findIndex((s) => s.id === c.stepId) + 1,
    title: c.title,
    contract: c.contract,
    rounds: [],
    attempts: [c.attempt],
    best: 0,
    usage: ZERO_USAGE,
    budget,
    stoppedBy: null,
    error: null,
    carriedFrom: c.runId,
  }));
}

/** The run's first plan, when it was given: no planner is asked for it. */
export function givenPlanDue(context: RunContext): boolean {
  return context.input.plan !== undefined && context.plan === null;
}

/** The plan a run takes (given, or the planner's) and its rubric, thresholds resolved; a fixed rubric stands. */
export function takePlan(context: RunContext, plan: Plan): Pick<RunContext, 'plan' | 'criteria'> {
  const { criteria } = context.input;
  return { plan: criteria ? { ...plan, criteria } : plan, criteria: rubricOf(context.input, plan.criteria) };
}

/** The given plan, taken as the run's, and its `plan.created`, which says it was given. */
export function takeGivenPlan(context: RunContext): Pick<RunContext, 'plan' | 'criteria'> {
  return takePlan(context, planOfDocument(context.input.plan!.document));
}

/** The `plan.created` of the plan just taken (`given` when it was the run's given plan). */
export function planCreatedEvent(context: RunContext, given: boolean): RecordParams {
  return {
    type: 'plan.created',
    payload: {
      plan: context.plan!,
      criteria: context.criteria,
      replan: context.replans,
      ...(given ? { given: { file: context.input.plan!.file } } : {}),
    },
  };
}

/** The ready step was kept from the run this one continues (and has not run here since). */
export function readyStepCarried(context: RunContext): boolean {
  const step = readyStep(context);
  return step !== undefined && latest(context, step.id)?.carriedFrom !== undefined;
}

/** The `step.carried` of the ready step, kept from the run this one continues. */
export function stepCarriedEvent(context: RunContext): RecordParams {
  const step = readyStep(context)!;
  const outcome = latest(context, step.id)!;
  return {
    type: 'step.carried',
    payload: {
      stepId: step.id,
      stepNumber: context.plan!.steps.indexOf(step) + 1,
      title: step.title,
      fromRunId: outcome.carriedFrom!,
    },
  };
}

/** The replans the run has left (`maxReplans` less those made). */
export function replansLeft(context: RunContext): number {
  return context.input.maxReplans - context.replans;
}

/** What an exhausted step leads to now: `onStepExhausted`, `advance` once no replan is left. */
export function exhaustionPolicyOf(context: RunContext): ExhaustionPolicy {
  return exhaustionPolicy(context.input.onStepExhausted, replansLeft(context));
}

/** The latest outcome of a step id, if it ran. */
export function latest(context: Pick<RunContext, 'outcomes'>, stepId: string): StepOutcome | undefined {
  for (let i = context.outcomes.length - 1; i >= 0; i--)
    if (context.outcomes[i]!.stepId === stepId) return context.outcomes[i];
  return undefined;
}

export function outline(plan: Plan): PlanOutline {
  return { scope: plan.scope, steps: plan.steps.map((s) => ({ id: s.id, title: s.title })) };
}

export function dependencies(context: RunContext, stepIds: readonly string[]): DependencyArtifact[] {
  return stepIds.flatMap((id) => {
    const o = latest(context, id);
    const work = o && o.best >= 0 ? o.attempts[o.best]!.work : null;
    return work ? [{ stepId: id, title: o!.title, output: work.output }] : [];
  });
}

/** The ids of the plan's steps whose latest outcome passed. */
function passedStepIds(context: RunContext): string[] {
  return (context.plan?.steps ?? [])
    .filter((s) => latest(context, s.id)?.status === 'passed')
    .map((s) => s.id);
}

/** Totals and the one-line summary, in the reference's words, of a run that ended `status`. */
export function runTotals(context: RunContext, status: RunStatus): RunTotals {
  const steps = context.plan?.steps ?? [];
  const stepsPassed = passedStepIds(context).length;
  const totalRetries = context.outcomes.reduce((n, o) => n + Math.max(0, o.attempts.length - 1), 0);
  const durationMs = Math.max(0, context.budget.clock - context.input.startedAt);
  const passed = status === 'completed' && steps.length > 0 && stepsPassed === steps.length;
  const head =
    status === 'completed' ? 'PGE Harness completed' : `PGE Harness stopped (${STOP_REASON[status]})`;
  return {
    passed,
    stepsPassed,
    stepsTotal: steps.length,
    totalRetries,
    usage: context.budget.spent,
    durationMs,
    summary: `${head}: ${stepsPassed}/${steps.length} steps passed, ${totalRetries} total retries, ${(durationMs / 1000).toFixed(1)}s elapsed. Shared state: ${context.input.logPath}`,
  };
}

export { STOP_REASON };

/** The run's output, given by the final state it reached, which names its `status`. */
export function runOutcome(context: RunContext, status: RunStatus): RunOutcome {
  return {
    status,
    plan: context.plan,
    criteria: context.criteria,
    outcomes: context.outcomes,
    replans: context.replans,
    totals: runTotals(context, status),
    stoppedBy: context.stoppedBy,
    error: context.error,
  };
}

/** The closing event of the final state `completed`. */
export function completedEvent(context: RunContext): RecordParams {
  return { type: 'run.completed', payload: runTotals(context, 'completed') };
}

/**
 * The closing event of a final state that stopped the run, with its `message`. Logs hold the
 * message and a replay compares it, so each final state's words stay as logs have them.
 */
export function failedEvent(
  context: RunContext,
  status: Exclude<RunStatus, 'completed'>,
  message: string,
): Extract<RecordParams, { type: 'run.failed' }> {
  return {
    type: 'run.failed',
    payload: {
      ...runTotals(context, status),
      reason: STOP_REASON[status],
      message,
      inFlight: context.inFlight,
    },
  };
}

/** Why a budget stopped the run (a budget is checked before each request, which may make several calls). */
export function budgetMessage(context: RunContext): string {
  const b = context.budget;
  const limit = context.stoppedBy ? b.budgets[context.stoppedBy] : null;
  const used =
    context.stoppedBy === 'maxCostUsd'
      ? `$${b.spent.costUsd.toFixed(4)} spent`
      : context.stoppedBy === 'maxTokens'
        ? `${b.spent.promptTokens + b.spent.completionTokens} tokens used`
        : `${b.clock - b.startedAt} ms elapsed`;
  return `budget ${context.stoppedBy} (${limit}) would be exceeded by the next model call: ${used}`;
}

/** Why a failed call or step failed the run. */
export function errorMessage(context: RunContext): string {
  return context.error ? `${context.error.name}: ${context.error.message}` : 'the run failed';
}

/**
 * The closing event of the final state `interrupted`: the reason travels in its own field
 * (`interruptReason`, null when none was given), and in the message for a person to read.
 */
export function interruptedEvent(context: RunContext): RecordParams {
  const closing = failedEvent(context, 'interrupted', interruptMessage(context.interruptReason));
  return { ...closing, payload: { ...closing.payload, interruptReason: context.interruptReason } };
}

/** The closing event of the final state `cancelled`: who cancelled the run, and why, in its own field and the message. */
export function cancelledEvent(context: RunContext): RecordParams {
  const cancelled = context.cancelled!;
  const message = `the run was cancelled by ${cancelled.by}${cancelled.reason === null ? '' : `: ${cancelled.reason}`}`;
  const closing = failedEvent(context, 'cancelled', message);
  return { ...closing, payload: { ...closing.payload, cancelled } };
}

/** The message of an interrupted run's closing event, as logs have it. */
export function interruptMessage(reason: string | null): string {
  return reason === null ? INTERRUPTED : `${INTERRUPTED}: ${reason}`;
}

/** The message of an interrupted run's closing event when the interrupt gave no reason. */
export const INTERRUPTED = 'the run was interrupted';

/**
 * The replan after the last step: `step_exhausted` tells the planner the findings of the step's
 * best attempt, `plan_rejected` those of the attempt whose evaluation found the plan at fault.
 */
export function replanAfter(
  context: RunContext,
  reason: ReplanContext['reason'],
  stepId: string,
): Pick<RunContext, 'replans' | 'replan' | 'pendingReplan'> {
  const failed = latest(context, stepId)!;
  const judged = reason === 'plan_rejected' ? failed.attempts.length - 1 : failed.best;
  const evaluation = judged >= 0 ? failed.attempts[judged]!.evaluation : null;
  return {
    replans: context.replans + 1,
    pendingReplan: null,
    replan: {
      reason,
      previousPlan: context.plan!,
      failedStepId: failed.stepId,
      findings: evaluation?.findings ?? [],
      actionableFeedback: evaluation?.actionableFeedback ?? [],
      completedStepIds: passedStepIds(context),
    },
  };
}

/** The replan after a person rejected the plan at its gate, with their reason. */
export function replanDisapproved(
  context: RunContext,
  reason: string | null,
): Pick<RunContext, 'replans' | 'replan'> {
  return {
    replans: context.replans + 1,
    replan: {
      reason: 'disapproved',
      previousPlan: context.plan!,
      failedStepId: null,
      findings: [`a person rejected the plan${reason === null ? '' : `: ${reason}`}`],
      actionableFeedback: reason === null ? [] : [reason],
      completedStepIds: passedStepIds(context),
    },
  };
}

/** What a person is shown at the plan's gate: its scope and its steps. */
export function planSummary(plan: Plan): string {
  return [plan.scope, ...plan.steps.map((s, i) => `${i + 1}. ${s.title}`)].join('\n');
}

/** The actor id of a running step's chart. */
export function stepActorId(stepId: string): string {
  return `step.${stepId}`;
}

/** A step of the current plan is ended: started (or skipped) in this plan and not running. */
function ended(context: RunContext, stepId: string): boolean {
  return context.scheduled.includes(stepId) && !context.running.includes(stepId);
}

/**
 * The next step to start: the first of the plan, in plan order, not yet started whose
 * dependencies have all ended. The plan lists a step after those it depends on, so with one step
 * at a time this is the plan's order.
 */
export function readyStep(context: RunContext): PlanStep | undefined {
  if (context.plan === null) return undefined;
  return context.plan.steps.find(
    (s) => !context.scheduled.includes(s.id) && s.dependsOn.every((d) => ended(context, d)),
  );
}

/** Every step of the current plan has ended. */
export function allStepsEnded(context: RunContext): boolean {
  return context.running.length === 0 && (context.plan?.steps ?? []).every((s) => ended(context, s.id));
}

/** The `step.started` of the ready step. */
export function stepStartedEvent(context: RunContext): RecordParams {
  const step = readyStep(context)!;
  const stepNumber = context.plan!.steps.indexOf(step) + 1;
  return { type: 'step.started', payload: { stepId: step.id, stepNumber, title: step.title } };
}

/** The step machine's input for `step`, which starts now. */
export function stepInput(context: RunContext, step: PlanStep): StepInput {
  const plan = context.plan!;
  return {
    task: context.input.task,
    stepNumber: plan.steps.indexOf(step) + 1,
    plan,
    outline: outline(plan),
    criteria: context.criteria,
    dependencies: dependencies(context, step.dependsOn),
    settings: context.input,
    // What will happen if this step is exhausted, as the `policyIs…` guards decide it.
    onStepExhausted: exhaustionPolicyOf(context),
    replansLeft: replansLeft(context),
    budget: context.budget,
    inCompany: context.running.length > 0,
  };
}

/**
 * Starts `step`: it runs, and the steps running beside it now have company (`company`: they
 * report their spend from now on, as it does).
 */
export function started(
  context: RunContext,
  step: PlanStep,
): Pick<RunContext, 'scheduled' | 'running' | 'company'> {
  const company =
    context.running.length === 0
      ? context.company
      : [...new Set([...context.company, ...context.running, step.id])];
  return { scheduled: [...context.scheduled, step.id], running: [...context.running, step.id], company };
}

/**
 * Appends a finished step's outcome and takes over its spend. A step that ran alone all along
 * started with the run's budget and counted its own calls on it, so its budget is the run's; one
 * that had company reported each call as it went (`step.spent`), so only its clock is new.
 */
export function store(context: RunContext, o: StepOutcome): Partial<RunContext> {
  const budget = context.company.includes(o.stepId)
    ? { ...context.budget, clock: Math.max(context.budget.clock, o.budget.clock) }
    : { ...context.budget, spent: o.budget.spent, clock: o.budget.clock };
  return {
    outcomes: [...context.outcomes, o],
    budget,
    running: context.running.filter((id) => id !== o.stepId),
  };
}
