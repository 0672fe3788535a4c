import { and, assign, or, setup } from 'xstate';
import { describeError } from '../errors.js';
import { type RetrySignal, type Verdict, ZERO_USAGE } from '../schemas/index.js';
import { type CallLogic, notProvided } from './calls.js';
import {
  allCriteriaPass,
  budgetBroken,
  lastTwoMeans,
  noTrajectoryYet,
  retriesLeft,
  scoresImproving,
} from './guards.js';
import {
  bestAttempt,
  budgetAfter,
  contractFrom,
  contractSummary,
  evaluatedAttempt,
  failedValidationAttempt,
  failedValidators,
  invalidEvaluationAttempt,
  invalidWorkAttempt,
  lastRound,
  meansSoFar,
  outcome,
  rejectedAttempt,
  retryContext,
  type StepContext,
  settled,
  spend,
  step,
  stepBrief,
  workInput,
} from './step-context.js';
import type {
  ApprovalInput,
  ApprovalOutput,
  CallReport,
  ContractInput,
  ContractReviewInput,
  EvaluateOutput,
  EvaluationInput,
  RecordParams,
  StepInput,
  StepOutcome,
  WorkInput,
  WorkOutput,
} from './types.js';
import { reportOfError } from './types.js';

/**
 * The lifecycle of one step (DESIGN semantics 3–9): contract negotiation in bounded rounds, then
 * attempts of work → evaluation → judgement, retried with a refine or pivot signal until the step
 * passes or its attempts are spent. Every decision is a named guard: the validators' verdict
 * (`allValidatorsPass`), the evaluation's (`allCriteriaPass`), refine or pivot (`noTrajectoryYet`, `scoresImproving`), the bounds
 * (`retriesLeft`, `roundsLeft`) and the budgets (`overBudget`, `overBudgetAfterAnswer`). Every model
 * call is an invoked actor (`calls.ts`), stopped — and so cancelled — when its state is left. The
 * machine does no I/O: the calls and the `record` action are provided at the composition root.
 */

/** Records the verdict on the attempt just settled (`step.attempt.judged`). */
const recordJudgement = {
  type: 'record',
  params: ({ context }: { context: StepContext }): RecordParams => {
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
} as const;

/** A failed attempt followed by a retry with `signal`: the verdict, then the next attempt, each recorded. */
const retryWith = (signal: RetrySignal) =>
  [
    { type: 'settle', params: 'fail' },
    recordJudgement,
    { type: 'startAttempt', params: signal },
    {
      type: 'record',
      params: ({ context }: { context: StepContext }): RecordParams => ({
        type: 'step.retry.scheduled',
        payload: {
          stepId: step(context).id,
          stepNumber: context.input.stepNumber,
          nextAttempt: context.attempt,
          signal,
          ...lastTwoMeans(meansSoFar(context)),
        },
      }),
    },
  ] as const;

const workOutput = ({ event }: { event: { output: WorkOutput } }) => event.output;

/**
 * The generator's call for the current attempt, invoked by the attempt's state (`firstAttempt`,
 * `refining`, `pivoting`): the state gives the input, so the signal the generator is told is the
 * state it works in. The answer is handled alike in each.
 */
function work(input: (args: { context: StepContext }) => WorkInput) {
  return {
    src: 'doWork',
    input,
    onDone: [
      {
        guard: { type: 'workInvalid', params: workOutput },
        target: '#step.judging',
        actions: [
          { type: 'spend', params: workOutput },
          { type: 'scoreInvalidWork', params: workOutput },
        ],
      },
      {
        guard: { type: 'overBudgetAfterAnswer', params: workOutput },
        target: '#step.stopped',
        actions: [{ type: 'spend', params: workOutput }, 'noteBudget'],
      },
      {
        target: '#step.validating',
        actions: [
          { type: 'spend', params: workOutput },
          { type: 'keepWork', params: workOutput },
        ],
      },
    ],
    onError: { target: '#step.failed', actions: 'noteError' },
  } as const;
}

/** The step statechart. Provide the actors `proposeContract`, `reviewContract`, `doWork`, `evaluateWork`, and `record`. */
export const stepMachine = setup({
  types: {
    context: {} as StepContext,
    input: {} as StepInput,
    output: {} as StepOutcome,
  },
  actors: {
    proposeContract: notProvided('proposeContract') as CallLogic<'proposeContract'>,
    reviewContract: notProvided('reviewContract') as CallLogic<'reviewContract'>,
    doWork: notProvided('doWork') as CallLogic<'doWork'>,
    evaluateWork: notProvided('evaluateWork') as CallLogic<'evaluateWork'>,
    awaitApproval: notProvided('awaitApproval') as CallLogic<'awaitApproval'>,
  },
  guards: {
    /** The next model call would break a budget (DESIGN 9). */
    overBudget: ({ context }) => budgetBroken(context.budget) !== null,
    /** The answer's usage, once spent, leaves no budget for the next call. */
    overBudgetAfterAnswer: ({ context }, report: CallReport) => budgetAfter(context, report) !== null,
    contractApproved: ({ context }) => lastRound(context).review?.status === 'approved',
    roundsLeft: ({ context }) => context.round < context.input.maxContractRounds,
    /** The work never validated: the attempt is judged failed without calling the evaluator. */
    workInvalid: (_, output: WorkOutput) => output.work === null,
    /** The evaluation never validated: the attempt has no scores and fails (fail closed). */
    evaluationInvalid: (_, output: EvaluateOutput) => output.evaluation === null,
    /** Every validator of the work passed (or it had none). */
    allValidatorsPass: ({ context }) => failedValidators(context.pendingWork!).length === 0,
    /** At least one validator of the work failed: it is judged without the evaluator. */
    aValidatorFailed: ({ context }) => failedValidators(context.pendingWork!).length > 0,
    /**
     * Every criterion has a score at or above its threshold (DESIGN 3: fail closed), and no person
     * rejected the result at its gate.
     */
    allCriteriaPass: ({ context }) =>
      context.scored !== null && context.scored.invalid === null && allCriteriaPass(context.scored.scores),
    /** A person approves each contract before work starts (`approve` includes `contract`). */
    contractGateOn: ({ context }) => context.input.approve.includes('contract'),
    /** A person approves each passing result before the step passes (`approve` includes `step`). */
    stepGateOn: ({ context }) => context.input.approve.includes('step'),
    /** The person's decision at the gate was to approve. */
    approved: (_, decision: ApprovalOutput) => decision.decision === 'approve',
    retriesLeft: ({ context }) => retriesLeft(context.attempt, context.input.maxRetriesPerStep),
    /** The evaluator found the failure to be the plan's, not the work's (`failureKind: 'plan'`). */
    planAtFault: ({ context }) => context.scored?.evaluation?.failureKind === 'plan',
    /** The run may still revise its plan (`maxReplans`). */
    replansLeft: ({ context }) => context.input.replansLeft > 0,
    noTrajectoryYet: ({ context }) => noTrajectoryYet(meansSoFar(context)),
    scoresImproving: ({ context }) => scoresImproving(meansSoFar(context)),
  },
  actions: {
    record: (_, _params: RecordParams) => {},
    noteBudget: assign(({ context }) => ({
      stoppedBy: budgetBroken(context.budget),
    })),
    /** Keeps a failed call's error (the invoke's error event). */
    noteError: assign(({ context, event }) => {
      const error = (event as { error?: unknown }).error;
      const report = reportOfError(error);
      return { error: describeError(error), ...(report ? spend(context, report) : {}) };
    }),
    /** Adds a call's reported usage and clock (its answer's `CallReport`). */
    spend: assign(({ context }, report: CallReport) => spend(context, report)),
    /** Scores work that never validated (`workInvalid`). */
    scoreInvalidWork: assign(({ context }, worked: WorkOutput) => ({
      scored: invalidWorkAttempt(context, worked),
    })),
    /** Keeps valid work for the validators' verdict and the evaluation. */
    keepWork: assign((_, worked: WorkOutput) => ({ pendingWork: worked })),
    /** Keeps the attempt being judged, with the verdict of the transition the chart took. */
    settle: assign(({ context }, verdict: Verdict) => ({
      attempts: [...context.attempts, settled(context.scored!, verdict)],
      scored: null,
    })),
    /** Starts the next attempt with the signal of the retry state the transition enters. */
    startAttempt: assign(({ context }, signal: RetrySignal) => ({
      attempt: context.attempt + 1,
      signal,
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
    rejection: null,
    pendingWork: null,
    scored: null,
    attempts: [],
    usage: ZERO_USAGE,
    stoppedBy: null,
    error: null,
  }),
  initial: 'negotiating',
  // The outcome is the final state's: each gives its own (XState 5 types it as unknown).
  output: ({ event }) => event.output as StepOutcome,
  states: {
    negotiating: {
      initial: 'proposing',
      states: {
        proposing: {
          invoke: {
            src: 'proposeContract',
            input: ({ context }): ContractInput => {
              const last = context.rounds[context.rounds.length - 1];
              return {
                ...stepBrief(context),
                plan: context.input.outline,
                round: context.round,
                previous: last
                  ? {
                      proposal: last.proposal,
                      amendments: [
                        ...(last.review?.amendments ?? []),
                        ...(context.rejection === null ? [] : [context.rejection]),
                      ],
                    }
                  : null,
              };
            },
            onDone: [
              {
                // Budgets are guards on the transitions that lead to a model call (DESIGN 9).
                guard: { type: 'overBudgetAfterAnswer', params: ({ event }) => event.output },
                target: '#step.stopped',
                actions: [assign(({ context, event }) => spend(context, event.output)), 'noteBudget'],
              },
              {
                target: '#step.negotiating.reviewing',
                actions: assign(({ context, event }) => ({
                  ...spend(context, event.output),
                  rounds: [
                    ...context.rounds,
                    { round: context.round, proposal: event.output.proposal, review: null },
                  ],
                  rejection: null,
                })),
              },
            ],
            onError: { target: '#step.failed', actions: 'noteError' },
          },
        },
        reviewing: {
          invoke: {
            src: 'reviewContract',
            input: ({ context }): ContractReviewInput => ({
              ...stepBrief(context),
              round: context.round,
              maxRounds: context.input.maxContractRounds,
              proposal: lastRound(context).proposal,
            }),
            onDone: {
              target: '#step.negotiating.decided',
              actions: assign(({ context, event }) => ({
                ...spend(context, event.output),
                rounds: [
                  ...context.rounds.slice(0, -1),
                  { ...lastRound(context), review: event.output.review },
                ],
              })),
            },
            onError: { target: '#step.failed', actions: 'noteError' },
          },
        },
        decided: {
          always: [
            { guard: 'overBudget', target: '#step.stopped', actions: 'noteBudget' },
            {
              guard: 'contractApproved',
              target: 'agreed',
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
              target: 'agreed',
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
        /** The contract stands: with the contract gate on, a person approves it before the work. */
        agreed: {
          always: [
            { guard: 'contractGateOn', target: 'awaitingApproval' },
            { target: '#step.executing.firstAttempt' },
          ],
        },
        /**
         * Waits for a person's decision on the contract. Approved: the work starts. Rejected: the
         * generator proposes again with the reason as an amendment while rounds are left
         * (`maxContractRounds`), else the step is exhausted.
         */
        awaitingApproval: {
          invoke: {
            src: 'awaitApproval',
            input: ({ context }): ApprovalInput => ({
              gate: 'contract',
              stepId: step(context).id,
              stepNumber: context.input.stepNumber,
              attempt: null,
              summary: contractSummary(context.contract!),
            }),
            onDone: [
              {
                guard: { type: 'approved', params: ({ event }) => event.output },
                target: '#step.executing.firstAttempt',
              },
              {
                guard: 'roundsLeft',
                target: 'proposing',
                actions: assign(({ context, event }) => ({
                  round: context.round + 1,
                  contract: null,
                  rejection: `a person rejected the contract${event.output.reason === null ? '' : `: ${event.output.reason}`}`,
                })),
              },
              { target: '#step.exhausted' },
            ],
            onError: { target: '#step.failed', actions: 'noteError' },
          },
        },
      },
    },
    /**
     * The generator works on the current attempt. Which attempt is the child state: the first,
     * or a retry that refines or pivots — the signal the generator is given is the state the
     * chart is in while it works.
     */
    executing: {
      initial: 'firstAttempt',
      states: {
        firstAttempt: { invoke: work(({ context }) => workInput(context, null)) },
        refining: { invoke: work(({ context }) => workInput(context, retryContext(context, 'refine'))) },
        pivoting: { invoke: work(({ context }) => workInput(context, retryContext(context, 'pivot'))) },
      },
    },
    /**
     * The validators' verdict on the work. They ran on the generator's worker, in the run's
     * workspace, as the last part of the work call (so they see the files as the work left them);
     * the evaluator is asked only when every one passed, else the attempt is judged failed with
     * their output as the generator's feedback.
     */
    validating: {
      always: [
        { guard: 'allValidatorsPass', target: 'evaluating' },
        {
          guard: 'aValidatorFailed',
          target: 'judging',
          actions: assign(({ context }) => ({
            scored: failedValidationAttempt(context, context.pendingWork!),
            pendingWork: null,
          })),
        },
      ],
    },
    evaluating: {
      invoke: {
        src: 'evaluateWork',
        input: ({ context }): EvaluationInput => ({
          ...stepBrief(context),
          contract: context.contract!,
          attempt: context.attempt,
          artifact: context.pendingWork!.work!.output,
        }),
        onDone: [
          {
            guard: { type: 'evaluationInvalid', params: ({ event }) => event.output },
            target: '#step.judging',
            actions: assign(({ context, event }) => ({
              ...spend(context, event.output),
              scored: invalidEvaluationAttempt(context, context.pendingWork!, event.output),
              pendingWork: null,
            })),
          },
          {
            target: '#step.judging',
            actions: assign(({ context, event }) => ({
              ...spend(context, event.output),
              scored: evaluatedAttempt(context, context.pendingWork!, event.output),
              pendingWork: null,
            })),
          },
        ],
        onError: { target: '#step.failed', actions: 'noteError' },
      },
    },
    judging: {
      always: [
        { guard: and(['allCriteriaPass', 'stepGateOn']), target: 'awaitingApproval' },
        {
          guard: 'allCriteriaPass',
          target: 'passed',
          actions: [{ type: 'settle', params: 'pass' }, recordJudgement],
        },
        {
          // A rejection routed by its nature: the plan's goes to the planner, retries or not.
          guard: and(['planAtFault', 'replansLeft']),
          target: 'planRejected',
          actions: [{ type: 'settle', params: 'fail' }, recordJudgement],
        },
        {
          guard: and(['retriesLeft', 'overBudget']),
          target: 'stopped',
          actions: [{ type: 'settle', params: 'fail' }, recordJudgement, 'noteBudget'],
        },
        {
          guard: and(['retriesLeft', or(['noTrajectoryYet', 'scoresImproving'])]),
          target: 'executing.refining',
          actions: retryWith('refine'),
        },
        {
          guard: 'retriesLeft',
          target: 'executing.pivoting',
          actions: retryWith('pivot'),
        },
        { target: 'exhausted', actions: [{ type: 'settle', params: 'fail' }, recordJudgement] },
      ],
    },
    /**
     * The result passed its evaluation; with the step gate on, a person approves it. Approved: the
     * step passes. Rejected: the attempt is judged failed (`rejected`) and retried with the reason
     * as feedback, like any failed attempt (`judging`).
     */
    awaitingApproval: {
      invoke: {
        src: 'awaitApproval',
        input: ({ context }): ApprovalInput => ({
          gate: 'step',
          stepId: step(context).id,
          stepNumber: context.input.stepNumber,
          attempt: context.attempt,
          summary: context.scored!.work!.output,
        }),
        onDone: [
          {
            guard: { type: 'approved', params: ({ event }) => event.output },
            target: 'passed',
            actions: [{ type: 'settle', params: 'pass' }, recordJudgement],
          },
          {
            target: 'judging',
            actions: assign(({ context, event }) => ({
              scored: rejectedAttempt(context.scored!, event.output.reason),
            })),
          },
        ],
        onError: { target: 'failed', actions: 'noteError' },
      },
    },
    passed: {
      type: 'final',
      output: ({ context }) => outcome(context, 'passed'),
      entry: [
        {
          type: 'record',
          params: ({ context }) => ({
            type: 'step.passed',
            payload: {
              stepId: step(context).id,
              stepNumber: context.input.stepNumber,
              attempt: context.attempt,
              bestAttempt: bestAttempt(context) + 1,
            },
          }),
        },
      ],
    },
    exhausted: {
      type: 'final',
      output: ({ context }) => outcome(context, 'exhausted'),
      entry: [
        {
          type: 'record',
          params: ({ context }) => {
            const best = bestAttempt(context);
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
    /** The step cannot pass as planned: the run chart sends the run back to the planner. */
    planRejected: {
      type: 'final',
      output: ({ context }) => outcome(context, 'plan_rejected'),
      entry: [
        {
          type: 'record',
          params: ({ context }) => ({
            type: 'step.plan.rejected',
            payload: {
              stepId: step(context).id,
              stepNumber: context.input.stepNumber,
              attempt: context.attempt,
            },
          }),
        },
      ],
    },
    stopped: { type: 'final', output: ({ context }) => outcome(context, 'stopped') },
    failed: { type: 'final', output: ({ context }) => outcome(context, 'failed') },
  },
});
