import type { ContractReview, JudgedScore, Phase, ResolvedCriterion, RunEvent } from '../schemas/index.js';
import { type ActiveStates, activeStates } from './active-state.js';
import { describeEvent } from './event-text.js';

/**
 * What the dashboard shows of one run, folded from its events. The page only renders this object,
 * so every rule about what an event means lives here, typed and tested, not in browser code. All
 * strings are data: the page puts them into the DOM as text, never as markup.
 */

/** A plan step as the plan lists it, with how far it got. */
export interface PlanStepView {
  id: string;
  title: string;
  description: string;
  dependsOn: string[];
  status: StepStatus;
}

/** Where a step stands. */
export type StepStatus = 'pending' | 'running' | 'passed' | 'failed';

/** One round of contract negotiation: the proposal and, once it came, its review. */
export interface ContractRoundView {
  round: number;
  title: string;
  acceptanceCriteria: string[];
  review: ContractReview | null;
}

/** One attempt at a step: the work, the evaluation and the harness's verdict. */
export interface AttemptView {
  attempt: number;
  output: string | null;
  /** Why the work was invalid, when it was. */
  workProblem: string | null;
  summary: string | null;
  findings: string[];
  feedback: string[];
  /** Why the evaluation was invalid, when it was. */
  evaluationProblem: string | null;
  verdict: 'pass' | 'fail' | null;
  reason: string | null;
  weightedMean: number | null;
  scores: JudgedScore[];
}

/** A retry and its signal: refine keeps the direction, pivot changes it. */
export interface DecisionView {
  nextAttempt: number;
  signal: 'refine' | 'pivot';
  previousMean: number | null;
  lastMean: number | null;
}

/** One run of one plan step (a step run again after a replan gets a second entry). */
export interface StepView {
  stepNumber: number;
  stepId: string;
  title: string;
  status: StepStatus;
  rounds: ContractRoundView[];
  /** The binding contract: agreed, or imposed at the round limit. */
  contract: { title: string; acceptanceCriteria: string[]; imposed: boolean; outstanding: string[] } | null;
  attempts: AttemptView[];
  decisions: DecisionView[];
}

/** Model usage of one phase, summed over its calls (repairs included). */
export interface PhaseView {
  phase: Phase;
  calls: number;
  promptTokens: number;
  completionTokens: number;
  costUsd: number;
  latencyMs: number;
}

/** One line of the event timeline. */
export interface TimelineEntry {
  seq: number;
  ts: string;
  type: RunEvent['type'];
  text: string;
}

/** Everything the page shows of a run. */
export interface RunView {
  runId: string;
  task: string | null;
  /** `running` until a closing event; then the run's outcome. */
  status: 'running' | 'passed' | 'failed';
  /** The closing event's summary and, for `run.failed`, its reason and message. */
  outcome: { summary: string; reason: string | null; message: string | null } | null;
  startedAt: string | null;
  updatedAt: string | null;
  durationMs: number | null;
  models: { planner: string; generator: string; evaluator: string } | null;
  active: ActiveStates;
  plan: { scope: string; replan: number; steps: PlanStepView[]; criteria: ResolvedCriterion[] } | null;
  steps: StepView[];
  phases: PhaseView[];
  totals: Omit<PhaseView, 'phase'>;
  timeline: TimelineEntry[];
}

/** A line of the run list. */
export interface RunSummary {
  runId: string;
  task: string | null;
  status: RunView['status'];
  updatedAt: string | null;
  events: number;
}

const PHASES: readonly Phase[] = ['plan', 'contract', 'contract_review', 'work', 'evaluation'];

function newAttempt(attempt: number): AttemptView {
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

/** The view of a run from its events so far, in seq order. */
export function buildRunView(runId: string, events: readonly RunEvent[]): RunView {
  const view: RunView = {
    runId,
    task: null,
    status: 'running',
    outcome: null,
    startedAt: events[0]?.ts ?? null,
    updatedAt: events.at(-1)?.ts ?? null,
    durationMs: null,
    models: null,
    active: activeStates(events),
    plan: null,
    steps: [],
    phases: PHASES.map((phase) => ({
      phase,
      calls: 0,
      promptTokens: 0,
      completionTokens: 0,
      costUsd: 0,
      latencyMs: 0,
    })),
    totals: { calls: 0, promptTokens: 0, completionTokens: 0, costUsd: 0, latencyMs: 0 },
    timeline: events.map((e) => ({ seq: e.seq, ts: e.ts, type: e.type, text: describeEvent(e) })),
  };
  // A step number names the latest run of that step: a replanned plan may reuse it.
  const stepOf = (stepNumber: number) => view.steps.findLast((s) => s.stepNumber === stepNumber);
  const attemptOf = (stepNumber: number, attempt: number) => {
    const step = stepOf(stepNumber);
    if (!step) return null;
    let found = step.attempts.find((a) => a.attempt === attempt);
    if (!found) {
      found = newAttempt(attempt);
      step.attempts.push(found);
    }
    return found;
  };
  for (const event of events) apply(view, event, stepOf, attemptOf);
  if (view.plan) {
    for (const planStep of view.plan.steps) {
      const latest = view.steps.findLast((s) => s.stepId === planStep.id);
      planStep.status = latest?.status ?? 'pending';
    }
  }
  const first = events[0];
  const last = events.at(-1);
  if (view.durationMs === null && first && last) view.durationMs = Date.parse(last.ts) - Date.parse(first.ts);
  return view;
}

function apply(
  view: RunView,
  event: RunEvent,
  stepOf: (n: number) => StepView | undefined,
  attemptOf: (n: number, attempt: number) => AttemptView | null,
): void {
  switch (event.type) {
    case 'run.started':
      view.task = event.payload.task;
      view.models = event.payload.settings.models;
      return;
    case 'plan.created': {
      const { plan, criteria, replan } = event.payload;
      const steps = plan.steps.map((s) => ({
        id: s.id,
        title: s.title,
        description: s.description,
        dependsOn: s.dependsOn,
        status: 'pending' as const,
      }));
      view.plan = { scope: plan.scope, replan, steps, criteria };
      return;
    }
    case 'step.started':
      view.steps.push({
        stepNumber: event.payload.stepNumber,
        stepId: event.payload.stepId,
        title: event.payload.title,
        status: 'running',
        rounds: [],
        contract: null,
        attempts: [],
        decisions: [],
      });
      return;
    case 'step.contract.proposed': {
      const { proposal, round } = event.payload;
      stepOf(event.payload.stepNumber)?.rounds.push({
        round,
        title: proposal.title,
        acceptanceCriteria: proposal.acceptanceCriteria,
        review: null,
      });
      return;
    }
    case 'step.contract.reviewed': {
      const rounds = stepOf(event.payload.stepNumber)?.rounds ?? [];
      const round = rounds.findLast((r) => r.round === event.payload.round);
      if (round) round.review = event.payload.review;
      return;
    }
    case 'step.contract.agreed':
    case 'step.contract.imposed': {
      const step = stepOf(event.payload.stepNumber);
      if (!step) return;
      const { contract } = event.payload;
      step.contract = {
        title: contract.title,
        acceptanceCriteria: contract.acceptanceCriteria,
        imposed: contract.imposed,
        outstanding: event.type === 'step.contract.imposed' ? event.payload.outstandingAmendments : [],
      };
      return;
    }
    case 'step.work.completed': {
      const attempt = attemptOf(event.payload.stepNumber, event.payload.attempt);
      if (attempt) attempt.output = event.payload.work.output;
      return;
    }
    case 'step.work.invalid': {
      const attempt = attemptOf(event.payload.stepNumber, event.payload.attempt);
      if (attempt) attempt.workProblem = event.payload.problem;
      return;
    }
    case 'step.evaluation.completed': {
      const attempt = attemptOf(event.payload.stepNumber, event.payload.attempt);
      if (!attempt) return;
      const { evaluation } = event.payload;
      attempt.summary = evaluation.summary;
      attempt.findings = evaluation.findings;
      attempt.feedback = evaluation.actionableFeedback;
      return;
    }
    case 'step.evaluation.invalid': {
      const attempt = attemptOf(event.payload.stepNumber, event.payload.attempt);
      if (attempt) attempt.evaluationProblem = event.payload.problem;
      return;
    }
    case 'step.attempt.judged': {
      const attempt = attemptOf(event.payload.stepNumber, event.payload.attempt);
      if (!attempt) return;
      attempt.verdict = event.payload.verdict;
      attempt.reason = event.payload.reason;
      attempt.weightedMean = event.payload.weightedMean;
      attempt.scores = event.payload.scores;
      return;
    }
    case 'step.retry.scheduled': {
      const { nextAttempt, signal, previousMean, lastMean } = event.payload;
      stepOf(event.payload.stepNumber)?.decisions.push({ nextAttempt, signal, previousMean, lastMean });
      return;
    }
    case 'step.passed':
    case 'step.failed': {
      const step = stepOf(event.payload.stepNumber);
      if (step) step.status = event.type === 'step.passed' ? 'passed' : 'failed';
      return;
    }
    case 'model.call.completed': {
      const call = event.payload;
      for (const usage of [view.phases.find((p) => p.phase === call.phase), view.totals]) {
        if (!usage) continue;
        usage.calls += 1;
        usage.promptTokens += call.promptTokens;
        usage.completionTokens += call.completionTokens;
        usage.costUsd += call.costUsd;
        usage.latencyMs += call.latencyMs;
      }
      return;
    }
    case 'run.completed':
    case 'run.failed': {
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
      return;
    }
    default:
      return;
  }
}

/** The run list's line for a view. */
export function summarize(view: RunView): RunSummary {
  return {
    runId: view.runId,
    task: view.task,
    status: view.status,
    updatedAt: view.updatedAt,
    events: view.timeline.length,
  };
}
