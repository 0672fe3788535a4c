import type {
  ApprovalGate,
  ContractReview,
  JudgedScore,
  Phase,
  ResolvedCriterion,
  RetrySignal,
  Role,
  RunEvent,
  RunStopReason,
  Verdict,
} from '../schemas/index.js';
import type { RunListStatus } from '../schemas/run-status.js';

/**
 * The shape of what the dashboard shows of a run: `buildRunView` folds a run's events into a
 * `RunView`, the server sends it as JSON, and the page renders it. Every string in it is data,
 * which the page shows as text.
 */

/** Where one step's chart stands. */
export interface StepState {
  /** The plan position of the step. */
  stepNumber: number;
  /** The deepest active state of the step's machine (`step.executing.firstAttempt`). */
  step: string;
}

/**
 * The states a run is in after its latest event: its session's, its run chart's, and those of the
 * steps it runs, side by side along the plan's dependencies.
 */
export interface ActiveStates {
  /**
   * The deepest active state of the run's session on the coordinator that owns it
   * (`session.open.live.working`; `session.closed` once the run has ended).
   */
  session: string;
  /** The deepest active state of the run machine (`run.stepping.waiting`). */
  run: string;
  /**
   * The deepest active state of the latest step's machine (the one started last), or null before
   * the first step. Kept once the step has ended: its final state (`step.passed`).
   */
  step: string | null;
  /** The plan position of the step that `step` belongs to. */
  stepNumber: number | null;
  /** Every step whose chart is running, by plan position; empty between steps and once the run has ended. */
  steps: StepState[];
}

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
  verdict: Verdict | null;
  reason: string | null;
  weightedMean: number | null;
  scores: JudgedScore[];
}

/** A retry and its signal: refine keeps the direction, pivot changes it. */
export interface DecisionView {
  nextAttempt: number;
  signal: RetrySignal;
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
  /** The run the step passed in, when this run kept it from there (`pge continue`) rather than ran it. */
  keptFrom: string | null;
  /** The model calls made for this run of the step (contract, review, work, evaluation), repairs included. */
  usage: Usage;
}

/** Model usage summed over calls (repairs included). */
export interface Usage {
  calls: number;
  promptTokens: number;
  completionTokens: number;
  costUsd: number;
  latencyMs: number;
}

/** Model usage of one phase. */
export interface PhaseView extends Usage {
  phase: Phase;
}

/** One line of the event timeline. */
export interface TimelineEntry {
  seq: number;
  ts: string;
  type: RunEvent['type'];
  text: string;
}

/**
 * The model call the run waits for: the child actor its chart invoked (`doWork`, …), the role
 * that serves it and its request: its latest request while no event has followed it. A run with
 * one step running makes one call at a time; with steps side by side several calls may wait at
 * once, and only the latest request, until the next event, is shown.
 */
export interface CallView {
  actor: 'plan' | 'proposeContract' | 'reviewContract' | 'doWork' | 'evaluateWork';
  role: Role;
  requestId: string;
  since: string;
  /** The step the call is for; null for the plan. */
  stepNumber: number | null;
}

/** A gate the run waits at for a person's decision (`approval.requested` with no decision yet). */
export interface GateView {
  gate: ApprovalGate;
  /** The request's id, which a decision names. */
  requestId: string;
  stepNumber: number | null;
  attempt: number | null;
  /** What is to be approved: the plan, the contract, or the step's result, as the run put it. */
  summary: string;
  since: string;
}

/** Everything the page shows of a run. */
export interface RunView {
  runId: string;
  task: string | null;
  /** The job the run belongs to and its place in it, and the run it continues (`pge continue`); null until its start is seen. */
  job: { id: string; run: number; continues: string | null } | null;
  /** `running` until a closing event; then the run's outcome. */
  status: 'running' | 'passed' | 'failed';
  /** The closing event's summary and, for `run.failed`, its reason and message. */
  outcome: { summary: string; reason: RunStopReason | null; message: string | null } | null;
  startedAt: string | null;
  /** Who started the run, when it was started in someone's name (`--operator`, the page’s Start run); else null. */
  startedBy: string | null;
  updatedAt: string | null;
  durationMs: number | null;
  models: { planner: string; generator: string; evaluator: string } | null;
  /** Where the run's charts stand, from a replay of its events; null when they cannot be replayed (seen midway). */
  active: ActiveStates | null;
  /** The calls in flight, in the order they were asked, each shown as its chart state's child actor. */
  calls: CallView[];
  plan: { scope: string; replan: number; steps: PlanStepView[]; criteria: ResolvedCriterion[] } | null;
  /** The gates the run waits at, oldest first; none once it has ended. */
  gates: GateView[];
  steps: StepView[];
  phases: PhaseView[];
  totals: Usage;
  timeline: TimelineEntry[];
}

/** A line of the run list: the run at a glance. */
export interface RunSummary {
  runId: string;
  task: string | null;
  /**
   * Where the run stands, named as `pge runs` names it: `waiting` (at a gate, for a person),
   * `running`, `passed`, `completed` (some step failed), or how it stopped (`cancelled`, `stopped`
   * by a budget, `failed` on an error, `interrupted`, `aborted`).
   */
  status: RunListStatus;
  /** The gate it waits at, when `waiting`. */
  waitingAt: ApprovalGate | null;
  /** Steps of its current plan that passed (kept ones included), of how many; total null before a plan. */
  stepsPassed: number;
  stepsTotal: number | null;
  costUsd: number;
  startedAt: string | null;
  updatedAt: string | null;
  /** From its first event to its closing one; null while it runs (the page counts from `startedAt`). */
  durationMs: number | null;
  events: number;
}

/** The run list the server sends (`/api/runs`, and the `runs` event of `/events`). */
export interface RunList {
  runs: RunSummary[];
  /** The problems so far, oldest first: unreadable log lines, messages that failed validation. */
  problems: readonly string[];
}
