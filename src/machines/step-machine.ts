import { and, assign, enqueueActions, or, sendParent, setup } from 'xstate';
import { describeError } from '../errors.js';
import { type RetrySignal, type Verdict, ZERO_USAGE } from '../schemas/index.js';
import { type CallLogic, type CallName, callDeadline, notProvided } from './calls.js';
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
  spentEvent,
  step,
  stepBrief,
  workInput,
} from './step-context.js';
import type {
  ApprovalInput,
  ApprovalOutput,
  CallReport,
  CompanyEvent,
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
import { charged, reportOfError } from './types.js';

/**
 * The lifecycle of one step (DESIGN semantics 3–9): contract negotiation in bounded rounds, then
 * attempts of work → evaluation → judgement, retried with a refine or pivot signal until the step
 * passes or its attempts are spent. Every decision is a named guard: invalid answers
 * (`workInvalid`, `evaluationInvalid`), the validators' verdict (`allValidatorsPass`), the
 * evaluation's (`allCriteriaPass`), refine or pivot (`noTrajectoryYet`, `scoresImproving`), the
 * bounds (`retriesLeft`, `roundsLeft`) and the budgets (`overBudget`, `overBudgetAfterAnswer`); each
 * transition carries its own outcome, and how the step ended is the final state it reached, whose
 * output is the step's. Every model call is an invoked actor (`calls.ts`), stopped — and so
 * cancelled — when its state is left. The machine does no I/O: the calls and the `record` action
 * are provided at the composition root.
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

/** A failed call's transition: the step fails, keeping the error and what the call cost. */
const failedCall = {
  target: '#step.failed',
  actions: 'noteError',
} as const;

/**
 * The generator's call for the current attempt, invoked by the attempt's state (`firstAttempt`,
 * `refining`, `pivoting`): the state gives the input, so the signal the generator is told is the
 * state it works in. The answer is handled alike in each.
 */
function work(input: (args: { context: StepContext }) => WorkInput) {
  return {
    id: 'doWork',
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
    onError: failedCall,
  } as const;
}

/** The step statechart. Provide the actors `proposeContract`, `reviewContract`, `doWork`, `evaluateWork`, and `record`. */
export const stepMachine = setup({
  types: {
    context: {} as StepContext,
    input: {} as StepInput,
    output: {} as StepOutcome,
    events: {} as CompanyEvent,
  },
  actors: {
    proposeContract: notProvided('proposeContract') as CallLogic<'proposeContract'>,
    reviewContract: notProvided('reviewContract') as CallLogic<'reviewContract'>,
    doWork: notProvided('doWork') as CallLogic<'doWork'>,
    evaluateWork: notProvided('evaluateWork') as CallLogic<'evaluateWork'>,
    awaitApproval: notProvided('awaitApproval') as CallLogic<'awaitApproval'>,
  },
  delays: {
    callDeadline: ({ context }) => context.input.settings.callTimeoutMs,
  },
  guards: {
    /** No other step of the run has run beside this one since it started. */
    alone: ({ context }) => !context.inCompany,
    /** The next model call would break a budget (DESIGN 9). */
    overBudget: ({ context }) => budgetBroken(context.budget) !== null,
    /** The answer's usage, once spent, leaves no budget for the next call. */
    overBudgetAfterAnswer: ({ context }, report: CallReport) => budgetAfter(context, report) !== null,
    contractApproved: ({ context }) => lastRound(context).review?.status === 'approved',
    roundsLeft: ({ context }) => context.round < context.input.settings.maxContractRounds,
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
    contractGateOn: ({ context }) => context.input.settings.approve?.includes('contract') === true,
    /** A person approves each passing result before the step passes (`approve` includes `step`). */
    stepGateOn: ({ context }) => context.input.settings.approve?.includes('step') === true,
    /** The person's decision at the gate was to approve. */
    approved: (_, decision: ApprovalOutput) => decision.decision === 'approve',
    retriesLeft: ({ context }) => retriesLeft(context.attempt, context.input.settings.maxRetriesPerStep),
    /** The evaluator found the failure to be the plan's, not the work's (`failureKind: 'plan'`). */
    planAtFault: ({ context }) => context.scored?.evaluation?.failureKind === 'plan',
    /** The run may still revise its plan (`maxReplans`). */
    replansLeft: ({ context }) => context.input.replansLeft > 0,
    noTrajectoryYet: ({ context }) => noTrajectoryYet(meansSoFar(context)),
    scoresImproving: ({ context }) => scoresImproving(meansSoFar(context)),
  },
  actions: {
    record: (_, _params: RecordParams) => {},
    /** Cancels the call the state invoked as `call` and fails it with a `CallTimeoutError` (`calls.ts`). */
    timeOutCall: (_, _params: { call: CallName }) => {},
    noteBudget: assign(({ context }) => ({
      stoppedBy: budgetBroken(context.budget),
    })),
    /** Keeps a failed call's error (the invoke's error event), and spends what the call cost. */
    noteError: enqueueActions(({ context, event, enqueue }) => {
      const error = (event as { error?: unknown }).error;
      const report = reportOfError(error);
      enqueue.assign({ error: describeError(error), ...(report ? spend(context, report) : {}) });
      if (report !== null && context.inCompany) enqueue.sendParent(spentEvent(context, report));
    }),
    /**
     * Adds a call's reported usage and clock (its answer's `CallReport`). In company (steps side by
     * side) it also tells the run what the call cost, so that every step's budget counts every
     * step's calls; a step alone reports its spend in its outcome.
     */
    spend: enqueueActions(({ context, enqueue }, report: CallReport) => {
      enqueue.assign(spend(context, report));
      if (context.inCompany) enqueue.sendParent(spentEvent(context, report));
    }),
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
  context: ({ input: { budget, inCompany, ...input } }) => ({
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
    inCompany,
  }),
  initial: 'negotiating',
  // The outcome is the final state's: each gives its own (XState 5 types it as unknown).
  output: ({ event }) => event.output as StepOutcome,
  on: {
    // Another step started beside this one: from now on it reports its spend, all it has spent first.
    company: {
      guard: 'alone',
      actions: [
        assign({ inCompany: true }),
        sendParent(({ context }) =>
          spentEvent(context, { usage: context.usage, finishedAt: context.budget.clock }),
        ),
      ],
    },
    'budget.others': {
      // What the other steps' calls cost, counted in this step's budget.
      actions: assign(({ context, event }) => ({ budget: charged(context.budget, event) })),
    },
  },
  states: {
    negotiating: {
      description:
        'Before any work, the generator and the evaluator agree a contract for the step: what will be delivered, its acceptance criteria and how they will be checked.',
      initial: 'proposing',
      states: {
        proposing: {
          description:
            "The **generator** proposes the contract (invokes `proposeContract`); from round 2 on it revises its last proposal with the evaluator's amendments. Done: to the review, unless the spend so far means the review would break a budget (`overBudgetAfterAnswer`), then `stopped`. Failed: `failed`.",
          after: callDeadline('proposeContract'),
          invoke: {
            id: 'proposeContract',
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
                actions: [{ type: 'spend', params: ({ event }) => event.output }, 'noteBudget'],
              },
              {
                target: '#step.negotiating.reviewing',
                actions: [
                  { type: 'spend', params: ({ event }) => event.output },
                  assign(({ context, event }) => ({
                    rounds: [
                      ...context.rounds,
                      { round: context.round, proposal: event.output.proposal, review: null },
                    ],
                    rejection: null,
                  })),
                ],
              },
            ],
            onError: failedCall,
          },
        },
        reviewing: {
          description:
            'The **evaluator** reviews the proposal (invokes `reviewContract`): it approves it, or asks for amendments. Failed: `failed`.',
          after: callDeadline('reviewContract'),
          invoke: {
            id: 'reviewContract',
            src: 'reviewContract',
            input: ({ context }): ContractReviewInput => ({
              ...stepBrief(context),
              round: context.round,
              maxRounds: context.input.settings.maxContractRounds,
              proposal: lastRound(context).proposal,
            }),
            onDone: {
              target: '#step.negotiating.decided',
              actions: [
                { type: 'spend', params: ({ event }) => event.output },
                assign(({ context, event }) => ({
                  rounds: [
                    ...context.rounds.slice(0, -1),
                    { ...lastRound(context), review: event.output.review },
                  ],
                })),
              ],
            },
            onError: failedCall,
          },
        },
        decided: {
          description:
            'Over budget (`overBudget`): `stopped`. Approved (`contractApproved`): the contract is agreed (`step.contract.agreed`). Amendments with rounds left (`roundsLeft`, `maxContractRounds`): another round. Amendments in the last round: the proposal is taken with the amendments added to its criteria, and the contract is imposed (`step.contract.imposed`). Either way: `agreed`.',
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
        agreed: {
          description:
            'With the contract gate on (`contractGateOn`: `--approve contract`): `awaitingApproval`. Otherwise the work starts.',
          always: [
            { guard: 'contractGateOn', target: 'awaitingApproval' },
            { target: '#step.executing.firstAttempt' },
          ],
        },
        awaitingApproval: {
          description:
            "Waits for a person's decision on the contract (invokes `awaitApproval`). Approved (`approved`): the work starts. Rejected with rounds left (`roundsLeft`): the generator proposes again, told the reason as an amendment. Rejected in the last round: `exhausted`.",
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
            onError: failedCall,
          },
        },
      },
    },
    executing: {
      description:
        'The **generator** does the work of the current attempt against the contract, given the outputs of the steps this one depends on. Which attempt is the child state, and the child state calls the generator (invokes `doWork`): the signal the generator is told is the state it works in. On its answer, in order: work that stayed invalid after repairs (`workInvalid`) skips the evaluation and is judged at once as a failed attempt (`invalid_work`); an evaluation that would break a budget is not made (`overBudgetAfterAnswer`: `stopped`); otherwise the work goes to `validating`. Failed: `failed`.',
      initial: 'firstAttempt',
      states: {
        firstAttempt: {
          description:
            'The first attempt at the step: the generator works from the contract alone (invokes `doWork` with no retry context).',
          invoke: work(({ context }) => workInput(context, null)),
          after: callDeadline('doWork'),
        },
        refining: {
          description:
            "A retry with the **refine** signal: the generator improves its last attempt, told the scores, their change since the previous attempt and the evaluator's feedback (invokes `doWork` with the signal `refine`).",
          invoke: work(({ context }) => workInput(context, retryContext(context, 'refine'))),
          after: callDeadline('doWork'),
        },
        pivoting: {
          description:
            'A retry with the **pivot** signal: the scores were flat or falling, so the generator tries a different approach, told the same scores and feedback (invokes `doWork` with the signal `pivot`).',
          invoke: work(({ context }) => workInput(context, retryContext(context, 'pivot'))),
          after: callDeadline('doWork'),
        },
      },
    },
    validating: {
      description:
        "The validators' verdict (`--validate`, `validators`): they ran on the generator's worker, in the run's workspace, as the last part of the work call, so they see the files exactly as the work left them (`step.work.completed` records each one's result). Every one passed, or there are none (`allValidatorsPass`): `evaluating`. When one failed (`aValidatorFailed`) the evaluator is not asked: the attempt is judged failed (`failed_validation`) and the retry's feedback is what the failed validators printed. A decision that takes no time, like `judging`.",
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
      description:
        "The **evaluator** scores the artifact against every criterion of the rubric and the contract (invokes `evaluateWork`), with evidence, findings and actionable feedback. It sees the artifact, not the generator's notes or self-assessment. An evaluation that stayed invalid after repairs (`evaluationInvalid`) fails the attempt (`invalid_evaluation`): the harness fails closed. Failed: `failed`.",
      after: callDeadline('evaluateWork'),
      invoke: {
        id: 'evaluateWork',
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
            actions: [
              { type: 'spend', params: ({ event }) => event.output },
              assign(({ context, event }) => ({
                scored: invalidEvaluationAttempt(context, context.pendingWork!, event.output),
                pendingWork: null,
              })),
            ],
          },
          {
            target: '#step.judging',
            actions: [
              { type: 'spend', params: ({ event }) => event.output },
              assign(({ context, event }) => ({
                scored: evaluatedAttempt(context, context.pendingWork!, event.output),
                pendingWork: null,
              })),
            ],
          },
        ],
        onError: failedCall,
      },
    },
    judging: {
      description:
        "The chart, not a model, decides the verdict, and records it (`step.attempt.judged`) on the transition it takes. `allCriteriaPass` (every criterion has a score at or above its threshold, and no person rejected the result): `passed`, or first `awaitingApproval` with the step gate on (`stepGateOn`). A failure the evaluator found to be the plan's (`planAtFault`: `failureKind: plan`) while the run has a replan left (`replansLeft`, `maxReplans`): `planRejected`, whatever retries are left. Otherwise, with retries left (`retriesLeft`: at most `maxRetriesPerStep` retries): `stopped` if the retry would break a budget (`overBudget`); `executing.refining` when there is no trajectory yet (`noTrajectoryYet`: fewer than two scored attempts, as at the first retry) or the weighted mean rose (`scoresImproving`); `executing.pivoting` when it was flat or fell. The transition into a retry starts the next attempt with that signal (`step.retry.scheduled`); the contract stays as agreed. No retries left: `exhausted`. `judging` is a decision that takes no time: it passes within one step of the machine, so an inspector shows the transition it takes rather than the state.",
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
    awaitingApproval: {
      description:
        "With the step gate on (`stepGateOn`: `--approve step`), a result that passed its evaluation waits here for a person's decision (invokes `awaitApproval`) before the step passes. Approved (`approved`): `passed`, the verdict recorded. Rejected: back to `judging` with the attempt marked `rejected`, so it is judged failed and retried (refine or pivot, bounded by `retriesLeft`) with the reason as the generator's feedback.",
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
      description: 'The step passed. Records `step.passed` with the passing attempt.',
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
      description:
        'No attempt passed and no retries are left. Records `step.failed` with the best attempt and the policy; the run machine then applies `onStepExhausted`.',
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
    planRejected: {
      description:
        'The step cannot pass as planned. Records `step.plan.rejected`; the run machine sends the run back to the planner with the evaluation that said so (a replan, counted against `maxReplans`). Without a replan left, such a failure is retried like any other.',
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
    stopped: {
      description: 'The next model call would have broken a budget; the run machine goes to `stopped`.',
      type: 'final',
      output: ({ context }) => outcome(context, 'stopped'),
    },
    failed: {
      description: 'A call failed; the run machine goes to `failed`.',
      type: 'final',
      output: ({ context }) => outcome(context, 'failed'),
    },
  },
});
