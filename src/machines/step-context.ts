import type { Contract, ContractProposal, ErrorInfo, RetryContext, Usage } from '../schemas/index.js';
import { addUsage } from '../schemas/index.js';
import { bestAttemptIndex, budgetBroken, judgeAttempt } from './guards.js';
import type {
  AttemptRecord,
  BudgetState,
  CallReport,
  ContractRound,
  EvaluateOutput,
  StepInput,
  StepOutcome,
  StepStatus,
  WorkOutput,
} from './types.js';

/**
 * The step machine's context and the pure functions its transitions build from it: spending a
 * call's usage, the current round and step, the retry context a generator gets, the attempt
 * record, and the step's outcome. No XState here: `step-machine.ts` wires them into the chart.
 */

/**
 * Context of the step machine: what the step was given, fixed for the step (`input`), the live
 * budget, and what the step has done so far.
 *
 * Few keys at the top, on purpose. XState copies the context on every `assign`
 * (`Object.assign({}, context, update)`), and on Node 20 V8 turns such a copy of 20 keys or more
 * into a dictionary: a copy then costs about 4 µs instead of 0.25 µs, and every later read of the
 * context is a hash lookup (measured; with the input's 10 keys spread in, this context had 21).
 */
export interface StepContext {
  input: Omit<StepInput, 'budget'>;
  budget: BudgetState;
  round: number;
  rounds: ContractRound[];
  contract: Contract | null;
  attempt: number;
  signal: AttemptRecord['signal'];
  pendingWork: WorkOutput | null;
  attempts: AttemptRecord[];
  usage: Usage;
  status: StepStatus;
  stoppedBy: StepOutcome['stoppedBy'];
  error: ErrorInfo | null;
}

/**
 * Adds a call's reported usage and clock to the context, with the `changes` of the same update.
 *
 * Objects built for every call or event are not written `{ ...a, newKey }`: on Node 20, V8 adds
 * each key the spread object lacks on a slow path, about 0.5 µs a key (measured: `{ ...ref, 5 keys }`
 * cost 2.8 µs, the same object written out 25 ns). Small `Object.assign`s and literals are fast.
 */
export function spend<C extends Partial<StepContext>>(
  context: StepContext,
  report: CallReport,
  changes?: C,
): Pick<StepContext, 'usage' | 'budget'> & C {
  const update = {
    usage: addUsage(context.usage, report.usage),
    budget: {
      ...context.budget,
      spent: addUsage(context.budget.spent, report.usage),
      clock: Math.max(context.budget.clock, report.finishedAt),
    },
  };
  return Object.assign(update, changes);
}

export function lastRound(context: StepContext): ContractRound {
  return context.rounds[context.rounds.length - 1]!;
}

export function contractFrom(proposal: ContractProposal, rounds: number, amendments: string[]): Contract {
  return Object.assign({}, proposal, {
    acceptanceCriteria: [...proposal.acceptanceCriteria, ...amendments],
    rounds,
    imposed: amendments.length > 0,
  });
}

export function step(context: StepContext) {
  return context.input.plan.steps[context.input.stepNumber - 1]!;
}

export function retryContext(context: StepContext): RetryContext | null {
  if (context.attempt === 1) return null;
  const last = context.attempts[context.attempts.length - 1]!;
  const previous = context.attempts
    .slice(0, -1)
    .reverse()
    .find((a) => a.weightedMean !== null);
  return {
    signal: context.signal === 'pivot' ? 'pivot' : 'refine',
    scores: last.scores.map((s) => {
      const before = previous?.scores.find((p) => p.criterion === s.criterion)?.score ?? null;
      return {
        criterion: s.criterion,
        score: s.score,
        threshold: s.threshold,
        delta: s.score !== null && before !== null ? s.score - before : null,
      };
    }),
    feedback: last.evaluation?.actionableFeedback ?? [],
    // A fixed sentence, not the validation problem: that can quote the evaluator's raw answer,
    // which the generator must never see (DESIGN 7).
    invalidEvaluation:
      last.reason === 'invalid_evaluation'
        ? 'the evaluation of the previous attempt could not be read, so it has no scores; work from the contract'
        : null,
  };
}

export function outcome(context: StepContext): StepOutcome {
  const best = bestAttemptIndex(
    context.attempts.map((a) => ({
      verdict: a.verdict,
      weightedMean: a.weightedMean,
      hasWork: a.work !== null,
    })),
  );
  return {
    status: context.status,
    stepId: step(context).id,
    stepNumber: context.input.stepNumber,
    title: step(context).title,
    contract: context.contract,
    rounds: context.rounds,
    attempts: context.attempts,
    best,
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

/** Builds the record of the current attempt from its work and evaluation (or their absence). */
export function judged(context: StepContext, evaluated: EvaluateOutput | null): AttemptRecord {
  const work = context.pendingWork?.work ?? null;
  const evaluation = evaluated?.evaluation ?? null;
  const invalid = work === null ? 'invalid_work' : evaluation === null ? 'invalid_evaluation' : null;
  const judgement = judgeAttempt(context.input.criteria, { evaluation, invalid });
  return {
    attempt: context.attempt,
    signal: context.signal,
    work,
    evaluation,
    problem: work === null ? (context.pendingWork?.problem ?? null) : (evaluated?.problem ?? null),
    ...judgement,
  };
}
