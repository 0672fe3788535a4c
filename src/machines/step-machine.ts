import { and, assign, setup } from 'xstate';
import { ZERO_USAGE } from '../schemas/index.js';
import { notProvided, type StepAnswer } from './calls.js';
import { budgetBroken, lastTwoMeans, retriesLeft, retrySignal, toErrorInfo } from './guards.js';
import {
  budgetAfter,
  contractFrom,
  judged,
  lastRound,
  outcome,
  retryContext,
  type StepContext,
  spend,
  step,
} from './step-context.js';
import type {
  ContractInput,
  ContractReviewInput,
  EvaluationInput,
  RecordParams,
  StepInput,
  StepOutcome,
  WorkInput,
} from './types.js';

/**
 * The lifecycle of one step (DESIGN semantics 3–9): contract negotiation in bounded rounds, then
 * attempts of work → evaluation → judgement, retried with a refine or pivot signal until the step
 * passes or its attempts are spent. Every transition that leads to a model call is guarded by the
 * budgets. The machine
 * does no I/O: its model calls (`calls.ts`) and the `record` action are provided at the composition root.
 */

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
