import type {
  ApprovalDecision,
  ApprovalGate,
  AttemptRecord,
  Budgets,
  Contract,
  ContractInput,
  ContractProposal,
  ContractReview,
  ContractReviewInput,
  DependencyArtifact,
  ErrorInfo,
  Evaluation,
  EvaluationInput,
  ExhaustionPolicy,
  Plan,
  PlanInput,
  PlanOutline,
  ResolvedCriterion,
  RunEventDraft,
  RunSettings,
  Usage,
  ValidatorRun,
  Work,
  WorkInput,
} from '../schemas/index.js';
import { addUsage } from '../schemas/index.js';
import type { BudgetName } from './guards.js';

/**
 * The data the statecharts exchange with the actors plugged into them. Role actors return their
 * validated answer with the usage of the calls behind it and the time they finished, which the
 * budget guards read (the machines never read a clock themselves).
 */

/** What every role actor reports besides its answer. */
export interface CallReport {
  usage: Usage;
  /** Epoch milliseconds when the answer arrived. */
  finishedAt: number;
}

/**
 * The report a failed call's error carries when the call cost something (the worker answered with
 * a failure after its model calls): the chart counts that usage like any other.
 */
export function reportOfError(error: unknown): CallReport | null {
  const report = (error as { report?: CallReport } | null)?.report;
  return report !== undefined && typeof report === 'object' ? report : null;
}

/** Output of the `plan` call. */
export interface PlanOutput extends CallReport {
  plan: Plan;
}
/** Output of the `proposeContract` call. */
export interface ProposalOutput extends CallReport {
  proposal: ContractProposal;
}
/** Output of the `reviewContract` call. */
export interface ReviewOutput extends CallReport {
  review: ContractReview;
}
/**
 * Output of the `doWork` call: `work` is null when the answer never validated (fail closed);
 * `validation` is what the generator's validators made of it, null when there were none.
 */
export interface WorkOutput extends CallReport {
  work: Work | null;
  problem: string | null;
  validation: ValidatorRun[] | null;
}
/** Output of the `evaluateWork` call: `evaluation` is null when it never validated (fail closed). */
export interface EvaluateOutput extends CallReport {
  evaluation: Evaluation | null;
  problem: string | null;
}

/** What a person is asked at a gate (`awaitApproval`): which gate, where, and what is to be approved. */
export interface ApprovalInput {
  gate: ApprovalGate;
  stepId: string | null;
  stepNumber: number | null;
  attempt: number | null;
  summary: string;
}
/** A person's decision at a gate. */
export type ApprovalOutput = ApprovalDecision;

export type { AttemptRecord, ContractInput, ContractReviewInput, EvaluationInput, PlanInput, WorkInput };

/** One contract negotiation round. */
export interface ContractRound {
  round: number;
  proposal: ContractProposal;
  review: ContractReview | null;
}

/** Budget limits and the spend so far, threaded from the run into each step. */
export interface BudgetState {
  budgets: Budgets;
  /** Spend of the whole run so far. */
  spent: Usage;
  /** Epoch ms the run started, and the latest time an actor reported. */
  startedAt: number;
  clock: number;
}

/**
 * `budget` with a call's cost counted and its clock moved on to when the call finished (or, for
 * another step's calls, when theirs did): every spend of the run and its steps goes through here.
 */
export function charged(budget: BudgetState, { usage, finishedAt }: CallReport): BudgetState {
  return { ...budget, spent: addUsage(budget.spent, usage), clock: Math.max(budget.clock, finishedAt) };
}

/** Input of the step machine. */
export interface StepInput {
  task: string;
  stepNumber: number;
  plan: Plan;
  outline: PlanOutline;
  criteria: ResolvedCriterion[];
  dependencies: DependencyArtifact[];
  /**
   * The run's settings, whole: its bounds (`maxContractRounds`, `maxRetriesPerStep`), its gates
   * (`contract`, `step` apply to a step) and each call's deadline (`after callDeadline`).
   */
  settings: RunSettings;
  /** What an exhausted step leads to now: the run's `onStepExhausted`, `advance` once no replan is left. */
  onStepExhausted: ExhaustionPolicy;
  /** Replans the run has left (`maxReplans` less those made): a plan-level failure needs one. */
  replansLeft: number;
  budget: BudgetState;
  /** Whether other steps of the run are running beside this one as it starts (`company`). */
  inCompany: boolean;
}

/**
 * What a step and its run tell each other while steps run side by side: a step in company
 * reports each call's cost (`step.spent`), which the run passes on to the other steps running
 * (`budget.others`), so that every step's budget guards count every step's calls; `company` tells
 * a step that was alone that another has started beside it.
 */
export type CompanyEvent = { type: 'company' } | { type: 'budget.others'; usage: Usage; finishedAt: number };

/** A step's report of what a call cost, to its run (while in company). */
export interface StepSpentEvent {
  type: 'step.spent';
  stepId: string;
  usage: Usage;
  finishedAt: number;
}

/** How a step ended. */
export type StepStatus = 'passed' | 'exhausted' | 'plan_rejected' | 'stopped' | 'failed';

/** Output of the step machine: everything the step log and the run need. */
export interface StepOutcome {
  status: StepStatus;
  stepId: string;
  stepNumber: number;
  title: string;
  contract: Contract | null;
  rounds: ContractRound[];
  attempts: AttemptRecord[];
  /** Index into `attempts` of the attempt the step keeps (DESIGN 6), or -1. */
  best: number;
  /** Spend of this step alone. */
  usage: Usage;
  budget: BudgetState;
  stoppedBy: BudgetName | null;
  error: ErrorInfo | null;
  /** The run the step passed in, when this run kept it from there (`pge continue`) rather than ran it. */
  carriedFrom?: string;
}

type ClosingType = 'run.completed' | 'run.failed';
type ClosingDraft<T extends ClosingType> = {
  type: T;
  payload: Omit<Extract<RunEventDraft, { type: T }>['payload'], 'byPhase'>;
};

/**
 * The `record` action's parameter: an event for the coordinator to stamp and publish. The closing
 * events come without their per-phase table, which the coordinator adds: it sees every call's
 * phase and latency, which the charts do not track.
 */
export type RecordParams =
  | Exclude<RunEventDraft, { type: ClosingType }>
  | ClosingDraft<'run.completed'>
  | ClosingDraft<'run.failed'>;
