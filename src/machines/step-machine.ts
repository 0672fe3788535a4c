import { and, assign, setup } from 'xstate';
import type { Contract, ContractProposal, ErrorInfo, RetryContext, Usage } from '../schemas/index.js';
import { addUsage, ZERO_USAGE } from '../schemas/index.js';
import { notProvided, type StepAnswer } from './calls.js';
import {
  bestAttemptIndex,
  budgetBroken,
  judgeAttempt,
  lastTwoMeans,
  retriesLeft,
  retrySignal,
  toErrorInfo,
} from './guards.js';
import type {
  AttemptRecord,
  BudgetState,
  CallReport,
  ContractInput,
  ContractReviewInput,
  ContractRound,
  EvaluateOutput,
  EvaluationInput,
  RecordParams,
  StepInput,
  StepOutcome,
  StepStatus,
  WorkInput,
  WorkOutput,
} from './types.js';

/**
 * The lifecycle of one step (DESIGN semantics 3–9): contract negotiation in bounded rounds, then
 * attempts of work → evaluation → judgement, retried with a refine or pivot signal until the step
 * passes or its attempts are spent. Every transition that leads to a model call is guarded by the
 * budgets. The machine
 * does no I/O: its model calls (`calls.ts`) and the `record` action are provided at the composition root.
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
function spend<C extends Partial<StepContext>>(
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

function lastRound(context: StepContext): ContractRound {
  return context.rounds[context.rounds.length - 1]!;
}

function contractFrom(proposal: ContractProposal, rounds: number, amendments: string[]): Contract {
  return Object.assign({}, proposal, {
    acceptanceCriteria: [...proposal.acceptanceCriteria, ...amendments],
    rounds,
    imposed: amendments.length > 0,
  });
}

function step(context: StepContext) {
  return context.input.plan.steps[context.input.stepNumber - 1]!;
}

function retryContext(context: StepContext): RetryContext | null {
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

function outcome(context: StepContext): StepOutcome {
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
function budgetAfter(context: StepContext, report: CallReport | null): StepOutcome['stoppedBy'] {
  const budget = report ? spend(context, report).budget : context.budget;
  return budgetBroken(budget);
}

/** The step statechart. Provide `proposeContract`, `reviewContract`, `doWork`, `evaluateWork` and `record`. */
export const stepMachine = setup({
  types: {
    context: {} as StepContext,
    input: {} as StepInput,
    output: {} as StepOutcome,
    events: {} as StepAnswer,
  },
  guards: {
    overBudget: ({ context }) => budgetBroken(context.budget) !== null,
    contractApproved: ({ context }) => lastRound(context).review?.status === 'approved',
    roundsLeft: ({ context }) => context.round < context.input.maxContractRounds,
    attemptPassed: ({ context }) => context.attempts[context.attempts.length - 1]?.verdict === 'pass',
    retriesLeft: ({ context }) => retriesLeft(context.attempt, context.input.maxRetriesPerStep),
  },
  actions: {
    record: (_, _params: RecordParams) => {},
    proposeContract: notProvided('proposeContract') as (_: unknown, input: ContractInput) => void,
    reviewContract: notProvided('reviewContract') as (_: unknown, input: ContractReviewInput) => void,
    doWork: notProvided('doWork') as (_: unknown, input: WorkInput) => void,
    evaluateWork: notProvided('evaluateWork') as (_: unknown, input: EvaluationInput) => void,
    noteBudget: assign(({ context }) => ({
      stoppedBy: budgetBroken(context.budget),
    })),
  },
}).createMachine({
  id: 'step',
  context: ({ input: { budget, ...input } }) => ({
    input,
    budget,
    round: 1,
    rounds: [],
    contract: null,
    attempt: 1,
    signal: 'initial',
    pendingWork: null,
    attempts: [],
    usage: ZERO_USAGE,
    status: 'failed',
    stoppedBy: null,
    error: null,
  }),
  initial: 'negotiating',
  output: ({ context }) => outcome(context),
  states: {
    negotiating: {
      initial: 'proposing',
      states: {
        proposing: {
          entry: {
            type: 'proposeContract',
            params: ({ context }): ContractInput => {
              const last = context.rounds[context.rounds.length - 1];
              return {
                task: context.input.task,
                stepNumber: context.input.stepNumber,
                step: step(context),
                criteria: context.input.criteria,
                plan: context.input.outline,
                round: context.round,
                previous: last
                  ? { proposal: last.proposal, amendments: last.review?.amendments ?? [] }
                  : null,
              };
            },
          },
          on: {
            'answer.contract': [
              {
                // Budgets are guards on the transitions that lead to a model call (DESIGN 9).
                guard: ({ context, event }) => budgetAfter(context, event.output) !== null,
                target: '#step.stopped',
                actions: [assign(({ context, event }) => spend(context, event.output)), 'noteBudget'],
              },
              {
                target: '#step.negotiating.reviewing',
                actions: assign(({ context, event }) =>
                  spend(context, event.output, {
                    rounds: [
                      ...context.rounds,
                      { round: context.round, proposal: event.output.proposal, review: null },
                    ],
                  }),
                ),
              },
            ],
            'answer.failed': {
              target: '#step.failed',
              actions: assign({ error: ({ event }) => toErrorInfo(event.error) }),
            },
          },
        },
        reviewing: {
          entry: {
            type: 'reviewContract',
            params: ({ context }): ContractReviewInput => ({
              task: context.input.task,
              stepNumber: context.input.stepNumber,
              step: step(context),
              criteria: context.input.criteria,
              round: context.round,
              maxRounds: context.input.maxContractRounds,
              proposal: lastRound(context).proposal,
            }),
          },
          on: {
            'answer.contract_review': {
              target: '#step.negotiating.decided',
              actions: assign(({ context, event }) =>
                spend(context, event.output, {
                  rounds: [
                    ...context.rounds.slice(0, -1),
                    { ...lastRound(context), review: event.output.review },
                  ],
                }),
              ),
            },
            'answer.failed': {
              target: '#step.failed',
              actions: assign({ error: ({ event }) => toErrorInfo(event.error) }),
            },
          },
        },
        decided: {
          always: [
            { guard: 'overBudget', target: '#step.stopped', actions: 'noteBudget' },
            {
              guard: 'contractApproved',
              target: '#step.executing',
              actions: [
                assign({
                  contract: ({ context }) => contractFrom(lastRound(context).proposal, context.round, []),
                }),
                {
                  type: 'record',
                  params: ({ context }) => ({
                    type: 'step.contract.agreed',
                    payload: {
                      stepId: step(context).id,
                      stepNumber: context.input.stepNumber,
                      contract: context.contract!,
                    },
                  }),
                },
              ],
            },
            {
              guard: 'roundsLeft',
              target: 'proposing',
              actions: assign({ round: ({ context }) => context.round + 1 }),
            },
            {
              target: '#step.executing',
              actions: [
                assign({
                  contract: ({ context }) =>
                    contractFrom(
                      lastRound(context).proposal,
                      context.round,
                      lastRound(context).review?.amendments ?? [],
                    ),
                }),
                {
                  type: 'record',
                  params: ({ context }) => ({
                    type: 'step.contract.imposed',
                    payload: {
                      stepId: step(context).id,
                      stepNumber: context.input.stepNumber,
                      contract: context.contract!,
                      outstandingAmendments: lastRound(context).review?.amendments ?? [],
                    },
                  }),
                },
              ],
            },
          ],
        },
      },
    },
    executing: {
      entry: {
        type: 'doWork',
        params: ({ context }): WorkInput => ({
          task: context.input.task,
          stepNumber: context.input.stepNumber,
          step: step(context),
          criteria: context.input.criteria,
          plan: context.input.outline,
          contract: context.contract!,
          attempt: context.attempt,
          dependencies: context.input.dependencies,
          retry: retryContext(context),
        }),
      },
      on: {
        'answer.work': [
          {
            guard: ({ event }) => event.output.work === null,
            target: '#step.judging',
            actions: assign(({ context, event }) =>
              spend(context, event.output, {
                pendingWork: event.output,
              }),
            ),
          },
          {
            guard: ({ context, event }) =>
              event.output.work !== null && budgetAfter(context, event.output) !== null,
            target: '#step.stopped',
            actions: [
              assign(({ context, event }) =>
                spend(context, event.output, {
                  pendingWork: event.output,
                }),
              ),
              'noteBudget',
            ],
          },
          {
            target: '#step.evaluating',
            actions: assign(({ context, event }) =>
              spend(context, event.output, {
                pendingWork: event.output,
              }),
            ),
          },
        ],
        'answer.failed': {
          target: '#step.failed',
          actions: assign({ error: ({ event }) => toErrorInfo(event.error) }),
        },
      },
    },
    evaluating: {
      entry: {
        type: 'evaluateWork',
        params: ({ context }): EvaluationInput => ({
          task: context.input.task,
          stepNumber: context.input.stepNumber,
          step: step(context),
          criteria: context.input.criteria,
          contract: context.contract!,
          attempt: context.attempt,
          artifact: context.pendingWork!.work!.output,
        }),
      },
      on: {
        'answer.evaluation': {
          target: '#step.judging',
          actions: assign(({ context, event }) =>
            spend(context, event.output, {
              attempts: [...context.attempts, judged(context, event.output)],
              pendingWork: null,
            }),
          ),
        },
        'answer.failed': {
          target: '#step.failed',
          actions: assign({ error: ({ event }) => toErrorInfo(event.error) }),
        },
      },
    },
    judging: {
      entry: [
        assign(({ context }) =>
          context.pendingWork
            ? { attempts: [...context.attempts, judged(context, null)], pendingWork: null }
            : {},
        ),
        {
          type: 'record',
          params: ({ context }) => {
            const a = context.attempts[context.attempts.length - 1]!;
            return {
              type: 'step.attempt.judged',
              payload: {
                stepId: step(context).id,
                stepNumber: context.input.stepNumber,
                attempt: a.attempt,
                verdict: a.verdict,
                reason: a.reason,
                scores: a.scores,
                weightedMean: a.weightedMean,
              },
            };
          },
        },
      ],
      always: [
        { guard: 'attemptPassed', target: 'passed' },
        { guard: and(['retriesLeft', 'overBudget']), target: 'stopped', actions: 'noteBudget' },
        { guard: 'retriesLeft', target: 'retrying' },
        { target: 'exhausted' },
      ],
    },
    retrying: {
      entry: [
        assign(({ context }) => ({
          attempt: context.attempt + 1,
          signal: retrySignal(context.attempts.map((a) => a.weightedMean)),
        })),
        {
          type: 'record',
          params: ({ context }) => ({
            type: 'step.retry.scheduled',
            payload: {
              stepId: step(context).id,
              stepNumber: context.input.stepNumber,
              nextAttempt: context.attempt,
              signal: context.signal === 'pivot' ? 'pivot' : 'refine',
              ...lastTwoMeans(context.attempts.map((a) => a.weightedMean)),
            },
          }),
        },
      ],
      always: { target: 'executing' },
    },
    passed: {
      type: 'final',
      entry: [
        assign({ status: 'passed' }),
        {
          type: 'record',
          params: ({ context }) => ({
            type: 'step.passed',
            payload: {
              stepId: step(context).id,
              stepNumber: context.input.stepNumber,
              attempt: context.attempt,
              bestAttempt: outcome(context).best + 1,
            },
          }),
        },
      ],
    },
    exhausted: {
      type: 'final',
      entry: [
        assign({ status: 'exhausted' }),
        {
          type: 'record',
          params: ({ context }) => {
            const best = outcome(context).best;
            return {
              type: 'step.failed',
              payload: {
                stepId: step(context).id,
                stepNumber: context.input.stepNumber,
                attempts: context.attempts.length,
                bestAttempt: best >= 0 ? best + 1 : null,
                policy: context.input.onStepExhausted,
              },
            };
          },
        },
      ],
    },
    stopped: { type: 'final', entry: assign({ status: 'stopped' }) },
    failed: { type: 'final', entry: assign({ status: 'failed' }) },
  },
});

/** Builds the record of the current attempt from its work and evaluation (or their absence). */
function judged(context: StepContext, evaluated: EvaluateOutput | null): AttemptRecord {
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
