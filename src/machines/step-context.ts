import type {
  Contract,
  ContractProposal,
  ErrorInfo,
  Evaluation,
  RetryContext,
  RetrySignal,
  Usage,
  ValidatorRun,
  Verdict,
} from '../schemas/index.js';
import { addUsage } from '../schemas/index.js';
import { bestAttemptIndex, budgetBroken, type Scoring, scoreAttempt } from './guards.js';
import type {
  AttemptRecord,
  BudgetState,
  CallReport,
  ContractRound,
  EvaluateOutput,
  StepInput,
  StepOutcome,
  StepSpentEvent,
  StepStatus,
  WorkInput,
  WorkOutput,
} from './types.js';
import { charged } from './types.js';

/**
 * The step machine's context and the pure functions its transitions build from it: spending a
 * call's usage, the current round and step, the input and retry context a generator gets, the
 * scored attempt and its record, and the step's outcome. No XState here: `step-machine.ts` wires them into the chart.
 */

/**
 * Context of the step machine: what the step was given, fixed for the step (`input`), the live
 * budget, and what the step has done so far.
 */
export interface StepContext {
  input: Omit<StepInput, 'budget' | 'inCompany'>;
  budget: BudgetState;
  round: number;
  rounds: ContractRound[];
  contract: Contract | null;
  attempt: number;
  signal: AttemptRecord['signal'];
  /** A person's rejection of the contract, told to the generator with the next proposal. */
  rejection: string | null;
  /** The current attempt's work, valid, while it is evaluated. */
  pendingWork: WorkOutput | null;
  /** The current attempt scored, while the chart decides its verdict in `judging`. */
  scored: ScoredAttempt | null;
  attempts: AttemptRecord[];
  usage: Usage;
  stoppedBy: StepOutcome['stoppedBy'];
  error: ErrorInfo | null;
  /** Other steps run beside this one (or did since it started): it reports its spend to the run. */
  inCompany: boolean;
}

/** An attempt scored against the rubric, before the chart's verdict; `invalid` says why it has no scores. */
export type ScoredAttempt = Omit<AttemptRecord, 'verdict' | 'reason'> & {
  invalid: 'invalid_work' | 'invalid_evaluation' | 'failed_validation' | 'rejected' | null;
};

/** Adds a call's reported usage and clock to the context. */
export function spend(context: StepContext, report: CallReport): Pick<StepContext, 'usage' | 'budget'> {
  return {
    usage: addUsage(context.usage, report.usage),
    budget: charged(context.budget, report),
  };
}

/** The run's event for what a call of this step cost (`spend`, in company). */
export function spentEvent(context: StepContext, report: CallReport): StepSpentEvent {
  return { type: 'step.spent', stepId: step(context).id, usage: report.usage, finishedAt: report.finishedAt };
}

export function lastRound(context: StepContext): ContractRound {
  return context.rounds[context.rounds.length - 1]!;
}

export function contractFrom(proposal: ContractProposal, rounds: number, amendments: string[]): Contract {
  return {
    ...proposal,
    acceptanceCriteria: [...proposal.acceptanceCriteria, ...amendments],
    rounds,
    imposed: amendments.length > 0,
  };
}

/** What a person is shown at a contract's gate: its title, criteria and verification. */
export function contractSummary(contract: Contract): string {
  return [
    contract.title,
    ...contract.acceptanceCriteria.map((c) => `- ${c}`),
    `Verified by: ${contract.verificationMethod}`,
  ].join('\n');
}

export function step(context: StepContext) {
  return context.input.plan.steps[context.input.stepNumber - 1]!;
}

/** What every role is told of the step it works on: the task, the step and the rubric. */
export function stepBrief(context: StepContext) {
  return {
    task: context.input.task,
    stepNumber: context.input.stepNumber,
    step: step(context),
    criteria: context.input.criteria,
  };
}

/**
 * What the generator is told on a retry with `signal`, the signal of the retry state that calls it
 * (`executing.refining`, `executing.pivoting`): the last attempt's scores and their change, and its feedback.
 */
export function retryContext(context: StepContext, signal: RetrySignal): RetryContext {
  const last = context.attempts[context.attempts.length - 1]!;
  const previous = context.attempts
    .slice(0, -1)
    .reverse()
    .find((a) => a.weightedMean !== null);
  return {
    signal,
    scores: last.scores.map((s) => {
      const before = previous?.scores.find((p) => p.criterion === s.criterion)?.score ?? null;
      return {
        criterion: s.criterion,
        score: s.score,
        threshold: s.threshold,
        delta: s.score !== null && before !== null ? s.score - before : null,
      };
    }),
    // Failed validators are told as they printed: the evaluator did not see that attempt.
    feedback:
      (last.reason === 'failed_validation' || last.reason === 'rejected') && last.problem !== null
        ? [last.problem]
        : (last.evaluation?.actionableFeedback ?? []),
    // A fixed sentence, not the validation problem: that can quote the evaluator's raw answer,
    // which the generator must never see (DESIGN 7).
    invalidEvaluation:
      last.reason === 'invalid_evaluation'
        ? 'the evaluation of the previous attempt could not be read, so it has no scores; work from the contract'
        : null,
  };
}

/** What the generator is asked for the current attempt; `retry` is null on the first. */
export function workInput(context: StepContext, retry: RetryContext | null): WorkInput {
  return {
    ...stepBrief(context),
    plan: context.input.outline,
    contract: context.contract!,
    attempt: context.attempt,
    dependencies: context.input.dependencies,
    retry,
  };
}

/** Index of the attempt the step keeps (DESIGN 6), or -1. */
export function bestAttempt(context: StepContext): number {
  return bestAttemptIndex(
    context.attempts.map((a) => ({
      verdict: a.verdict,
      // A result a person rejected ranks below every evaluated one, whatever its scores.
      weightedMean: a.reason === 'rejected' ? null : a.weightedMean,
      hasWork: a.work !== null,
    })),
  );
}

/** The step's output, from the final state it reached: that state gives `status`. */
export function outcome(context: StepContext, status: StepStatus): StepOutcome {
  return {
    status,
    stepId: step(context).id,
    stepNumber: context.input.stepNumber,
    title: step(context).title,
    contract: context.contract,
    rounds: context.rounds,
    attempts: context.attempts,
    best: bestAttempt(context),
    usage: context.usage,
    budget: context.budget,
    stoppedBy: context.stoppedBy,
    error: context.error,
  };
}

/** The budget a call would break after spending `report`, or null (DESIGN 9). */
export function budgetAfter(context: StepContext, report: CallReport | null): StepOutcome['stoppedBy'] {
  const budget = report ? spend(context, report).budget : context.budget;
  return budgetBroken(budget);
}

/**
 * The current attempt scored against the rubric. Each transition that scores an attempt says what
 * it found, through one of the four functions below: the chart's guards decided it, so nothing
 * here decides it again.
 */
function attemptOf(
  context: StepContext,
  work: WorkOutput['work'],
  evaluation: Evaluation | null,
  invalid: ScoredAttempt['invalid'],
  problem: string | null,
): ScoredAttempt {
  const scoring: Scoring = scoreAttempt(context.input.criteria, evaluation);
  return { attempt: context.attempt, signal: context.signal, work, evaluation, problem, invalid, ...scoring };
}

/** Work that never validated (`workInvalid`): it is not evaluated, so it has no scores. */
export function invalidWorkAttempt(context: StepContext, worked: WorkOutput): ScoredAttempt {
  return attemptOf(context, null, null, 'invalid_work', worked.problem);
}

/** Work a validator failed (`aValidatorFailed`): not evaluated; the problem is what the validators printed. */
export function failedValidationAttempt(context: StepContext, worked: WorkOutput): ScoredAttempt {
  return attemptOf(
    context,
    worked.work,
    null,
    'failed_validation',
    validationProblem(failedValidators(worked)),
  );
}

/** Work whose evaluation never validated (`evaluationInvalid`): it has no scores (fail closed). */
export function invalidEvaluationAttempt(
  context: StepContext,
  worked: WorkOutput,
  evaluated: EvaluateOutput,
): ScoredAttempt {
  return attemptOf(context, worked.work, null, 'invalid_evaluation', evaluated.problem);
}

/** Work with a valid evaluation, scored; its verdict is the chart's, in `judging`. */
export function evaluatedAttempt(
  context: StepContext,
  worked: WorkOutput,
  evaluated: EvaluateOutput,
): ScoredAttempt {
  return attemptOf(context, worked.work, evaluated.evaluation, null, evaluated.problem);
}

/** The attempt a person rejected at the step's gate (`approved` did not hold), with their reason. */
export function rejectedAttempt(scored: ScoredAttempt, reason: string | null): ScoredAttempt {
  return {
    ...scored,
    invalid: 'rejected',
    problem: `a person rejected the result${reason === null ? '' : `: ${reason}`}`,
  };
}

/** The validators of the work that failed. */
export function failedValidators(worked: WorkOutput): ValidatorRun[] {
  return worked.validation?.filter((run) => !run.passed) ?? [];
}

/** What the generator is told of failed validators: each one's name, exit code and output. */
function validationProblem(failed: readonly ValidatorRun[]): string {
  return failed
    .map((run) => {
      const how = run.exitCode === null ? 'failed' : `failed with exit code ${run.exitCode}`;
      return `validator "${run.validator}" ${how}:\n${run.output.trimEnd()}`;
    })
    .join('\n\n');
}

/** The current attempt with the chart's verdict: the record the step keeps. */
export function settled(scored: ScoredAttempt, verdict: Verdict): AttemptRecord {
  const { invalid, ...attempt } = scored;
  return {
    ...attempt,
    verdict,
    reason: verdict === 'pass' ? 'all_criteria_pass' : (invalid ?? 'below_threshold'),
  };
}

/** The weighted means of every attempt so far, the one being judged last, for the retry guards. */
export function meansSoFar(context: StepContext): (number | null)[] {
  const means = context.attempts.map((a) => a.weightedMean);
  if (context.scored) means.push(context.scored.weightedMean);
  return means;
}
