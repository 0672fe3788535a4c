import type { ModelCall, RunEvent, RunEventOf, RunEventType } from '../schemas/index.js';
import { jobOf } from '../schemas/index.js';
import type { AttemptView, RunView, StepView, Usage } from './run-view-types.js';

/**
 * What each kind of event does to a run's view (`buildRunView`): one small function per event
 * type, in the order a run records them. An event type without one changes nothing here (requests,
 * gates and the timeline are read from the whole list of events instead).
 */

/** A sum of usage with nothing in it. */
export const noUsage = (): Usage => ({
  calls: 0,
  promptTokens: 0,
  completionTokens: 0,
  costUsd: 0,
  latencyMs: 0,
});

/** Adds one model call to a sum of usage. */
export function addCall(usage: Usage, call: ModelCall): void {
  usage.calls += 1;
  usage.promptTokens += call.promptTokens;
  usage.completionTokens += call.completionTokens;
  usage.costUsd += call.costUsd;
  usage.latencyMs += call.latencyMs;
}

/** The view being folded, and how an event finds the step or attempt it speaks of. */
export interface RunViewFold {
  view: RunView;
  /** The latest step of that number: a replanned plan may reuse it. */
  stepOf(stepNumber: number): StepView | undefined;
  /** That attempt of the step, added when the step has none yet; null when there is no such step. */
  attemptOf(stepNumber: number, attempt: number): AttemptView | null;
}

/** An attempt of a step before anything is known of it. */
export function newAttempt(attempt: number): AttemptView {
  return {
    attempt,
    output: null,
    workProblem: null,
    summary: null,
    findings: [],
    feedback: [],
    evaluationProblem: null,
    verdict: null,
    reason: null,
    weightedMean: null,
    scores: [],
  };
}

/** A step as it starts, or as it is carried passed from the run a job continues. */
function newStep(
  { stepNumber, stepId, title }: { stepNumber: number; stepId: string; title: string },
  status: StepView['status'],
  keptFrom: string | null,
): StepView {
  return {
    stepNumber,
    stepId,
    title,
    status,
    rounds: [],
    contract: null,
    attempts: [],
    decisions: [],
    keptFrom,
    usage: noUsage(),
  };
}

/** Applies `change` to the attempt an event names, if its step is known. */
function toAttempt(
  fold: RunViewFold,
  { stepNumber, attempt }: { stepNumber: number; attempt: number },
  change: (attempt: AttemptView) => void,
): void {
  const found = fold.attemptOf(stepNumber, attempt);
  if (found) change(found);
}

function runStarted({ view }: RunViewFold, event: RunEventOf<'run.started'>): void {
  const { task, settings, continues, startedBy } = event.payload;
  view.task = task;
  view.startedBy = startedBy ?? null;
  view.models = settings.models;
  view.job = { ...jobOf(event), continues: continues?.runId ?? null };
}

function planCreated({ view }: RunViewFold, event: RunEventOf<'plan.created'>): void {
  const { plan, criteria, replan } = event.payload;
  const steps = plan.steps.map((s) => ({
    id: s.id,
    title: s.title,
    description: s.description,
    dependsOn: s.dependsOn,
    status: 'pending' as const,
  }));
  view.plan = { scope: plan.scope, replan, steps, criteria };
}

function contractProposed(fold: RunViewFold, event: RunEventOf<'step.contract.proposed'>): void {
  const { proposal, round } = event.payload;
  fold.stepOf(event.payload.stepNumber)?.rounds.push({
    round,
    title: proposal.title,
    acceptanceCriteria: proposal.acceptanceCriteria,
    review: null,
  });
}

function contractReviewed(fold: RunViewFold, event: RunEventOf<'step.contract.reviewed'>): void {
  const rounds = fold.stepOf(event.payload.stepNumber)?.rounds ?? [];
  const round = rounds.findLast((r) => r.round === event.payload.round);
  if (round) round.review = event.payload.review;
}

function contractSettled(
  fold: RunViewFold,
  event: RunEventOf<'step.contract.agreed' | 'step.contract.imposed'>,
): void {
  const step = fold.stepOf(event.payload.stepNumber);
  if (!step) return;
  const { contract } = event.payload;
  step.contract = {
    title: contract.title,
    acceptanceCriteria: contract.acceptanceCriteria,
    imposed: contract.imposed,
    outstanding: event.type === 'step.contract.imposed' ? event.payload.outstandingAmendments : [],
  };
}

function stepEnded(
  fold: RunViewFold,
  event: RunEventOf<'step.passed' | 'step.plan.rejected' | 'step.failed'>,
): void {
  const step = fold.stepOf(event.payload.stepNumber);
  if (step) step.status = event.type === 'step.passed' ? 'passed' : 'failed';
}

function modelCallCompleted({ view }: RunViewFold, event: RunEventOf<'model.call.completed'>): void {
  const call = event.payload;
  for (const usage of [view.phases.find((p) => p.phase === call.phase), view.totals])
    if (usage) addCall(usage, call);
}

function runClosed({ view }: RunViewFold, event: RunEventOf<'run.completed' | 'run.failed'>): void {
  view.status = event.payload.passed ? 'passed' : 'failed';
  view.durationMs = event.payload.durationMs;
  const failed = event.type === 'run.failed' ? event.payload : null;
  view.outcome = {
    summary: event.payload.summary,
    reason: failed?.reason ?? null,
    message: failed?.message ?? null,
  };
  // A step the run stopped in the middle of did not pass.
  for (const step of view.steps) if (step.status === 'running') step.status = 'failed';
}

/** The change each event type makes to the view; one missing makes none. */
const FOLDS: { [T in RunEventType]?: (fold: RunViewFold, event: RunEventOf<T>) => void } = {
  'run.started': runStarted,
  'step.carried': ({ view }, { payload }) => view.steps.push(newStep(payload, 'passed', payload.fromRunId)),
  'plan.created': planCreated,
  'step.started': ({ view }, { payload }) => view.steps.push(newStep(payload, 'running', null)),
  'step.contract.proposed': contractProposed,
  'step.contract.reviewed': contractReviewed,
  'step.contract.agreed': contractSettled,
  'step.contract.imposed': contractSettled,
  'step.work.completed': (fold, { payload }) =>
    toAttempt(fold, payload, (a) => {
      a.output = payload.work.output;
    }),
  'step.work.invalid': (fold, { payload }) =>
    toAttempt(fold, payload, (a) => {
      a.workProblem = payload.problem;
    }),
  'step.evaluation.completed': (fold, { payload }) =>
    toAttempt(fold, payload, (a) => {
      a.summary = payload.evaluation.summary;
      a.findings = payload.evaluation.findings;
      a.feedback = payload.evaluation.actionableFeedback;
    }),
  'step.evaluation.invalid': (fold, { payload }) =>
    toAttempt(fold, payload, (a) => {
      a.evaluationProblem = payload.problem;
    }),
  'step.attempt.judged': (fold, { payload }) =>
    toAttempt(fold, payload, (a) => {
      a.verdict = payload.verdict;
      a.reason = payload.reason;
      a.weightedMean = payload.weightedMean;
      a.scores = payload.scores;
    }),
  'step.retry.scheduled': (fold, { payload }) => {
    const { nextAttempt, signal, previousMean, lastMean } = payload;
    fold.stepOf(payload.stepNumber)?.decisions.push({ nextAttempt, signal, previousMean, lastMean });
  },
  'step.passed': stepEnded,
  'step.plan.rejected': stepEnded,
  'step.failed': stepEnded,
  'model.call.completed': modelCallCompleted,
  'run.completed': runClosed,
  'run.failed': runClosed,
};

/** Folds one event into the view. */
export function foldEvent(fold: RunViewFold, event: RunEvent): void {
  // The table is keyed by type, so the handler found is the one for this event's type.
  (FOLDS[event.type] as ((fold: RunViewFold, event: RunEvent) => void) | undefined)?.(fold, event);
}
