import { assign, setup } from 'xstate';
import { describeError } from '../errors.js';
import { addUsage, ZERO_USAGE } from '../schemas/index.js';
import { type CallLogic, notProvided } from './calls.js';
import { budgetBroken, exhaustionPolicy, resolveCriteria } from './guards.js';
import {
  budgetMessage,
  completedEvent,
  dependencies,
  errorMessage,
  failedEvent,
  interruptedEvent,
  latest,
  outline,
  planSummary,
  type RunContext,
  type RunInput,
  type RunOutcome,
  replanAfter,
  replanDisapproved,
  replansLeft,
  runOutcome,
  store,
} from './run-context.js';
import { stepMachine } from './step-machine.js';
import {
  type ApprovalInput,
  type ApprovalOutput,
  type PlanInput,
  type RecordParams,
  reportOfError,
  type StepInput,
  type StepOutcome,
} from './types.js';

export type { RunInput, RunOutcome, RunStatus } from './run-context.js';

/**
 * The run: planning → one step machine per plan step → summary, with the replan loop (bounded by
 * `maxReplans`) of `onStepExhausted: 'replan'` and of a failure the evaluator found to be the plan's, budget gates before every model call, and
 * an `interrupt` event for a clean stop. How a step ended and the exhaustion policy are named
 * guards. Free of I/O like the step machine.
 */

/** The run statechart. Provide the `plan` actor (see `calls.ts`), `runStep` (the step machine with its calls) and `record`. */
export const runMachine = setup({
  types: {
    context: {} as RunContext,
    input: {} as RunInput,
    output: {} as RunOutcome,
    /** `reason` says why in the closing event (a failed log write, a signal, an operator). */
    events: {} as { type: 'interrupt'; reason?: string },
  },
  actors: {
    plan: notProvided('plan') as CallLogic<'plan'>,
    awaitApproval: notProvided('awaitApproval') as CallLogic<'awaitApproval'>,
    runStep: stepMachine,
  },
  guards: {
    overBudget: ({ context }) => budgetBroken(context.budget) !== null,
    noMoreSteps: ({ context }) => context.index >= context.plan!.steps.length,
    stepAlreadyPassed: ({ context }) =>
      latest(context, context.plan!.steps[context.index]!.id)?.status === 'passed',
    stepPassed: (_, step: StepOutcome) => step.status === 'passed',
    stepStopped: (_, step: StepOutcome) => step.status === 'stopped',
    stepFailed: (_, step: StepOutcome) => step.status === 'failed',
    /** The step ended on a failure the evaluator found to be the plan's (it had a replan left). */
    stepRejectedPlan: (_, step: StepOutcome) => step.status === 'plan_rejected',
    /** `onStepExhausted: 'abort'`: an exhausted step fails the run. */
    policyIsAbort: ({ context }) =>
      exhaustionPolicy(context.input.onStepExhausted, replansLeft(context)) === 'abort',
    /** `onStepExhausted: 'replan'` with a replan left: an exhausted step sends the run back to the planner. */
    policyIsReplan: ({ context }) =>
      exhaustionPolicy(context.input.onStepExhausted, replansLeft(context)) === 'replan',
    replansLeft: ({ context }) => replansLeft(context) > 0,
    /** A person approves the plan before any step starts (`approve` includes `plan`). */
    planGateOn: ({ context }) => context.input.approve.includes('plan'),
    /** The person's decision at the gate was to approve. */
    approved: (_, decision: ApprovalOutput) => decision.decision === 'approve',
  },
  actions: {
    record: (_, _params: RecordParams) => {},
    noteBudget: assign(({ context }) => ({
      stoppedBy: budgetBroken(context.budget),
    })),
    /** Keeps a failed actor's error (the invoke's error event). */
    noteError: assign(({ context, event }) => {
      const error = (event as { error?: unknown }).error;
      const report = reportOfError(error);
      if (report === null) return { error: describeError(error) };
      const budget = {
        ...context.budget,
        spent: addUsage(context.budget.spent, report.usage),
        clock: Math.max(context.budget.clock, report.finishedAt),
      };
      return { error: describeError(error), budget };
    }),
  },
}).createMachine({
  id: 'run',
  context: ({ input }) => ({
    input,
    plan: null,
    criteria: [],
    replans: 0,
    replan: null,
    index: 0,
    outcomes: [],
    budget: { budgets: input.budgets, spent: ZERO_USAGE, startedAt: input.startedAt, clock: input.startedAt },
    stoppedBy: null,
    error: null,
    interruptReason: null,
  }),
  initial: 'planning',
  // The outcome is the final state's: each gives its own (XState 5 types it as unknown).
  output: ({ event }) => event.output as RunOutcome,
  on: {
    interrupt: {
      target: '.interrupted',
      // An empty reason is none: the closing message then says no more than that.
      actions: assign({ interruptReason: ({ event }) => event.reason || null }),
    },
  },
  states: {
    planning: {
      initial: 'gate',
      states: {
        gate: {
          always: [
            { guard: 'overBudget', target: '#run.stopped', actions: 'noteBudget' },
            { target: 'calling' },
          ],
        },
        calling: {
          invoke: {
            src: 'plan',
            input: ({ context }): PlanInput => ({
              task: context.input.task,
              maxSteps: context.input.maxSteps,
              replan: context.replan,
              ...(context.input.criteria ? { rubric: context.input.criteria } : {}),
            }),
            onDone: {
              target: 'planned',
              actions: [
                assign(({ context, event }) => ({
                  // A fixed rubric stands whatever the planner answered.
                  plan: context.input.criteria
                    ? { ...event.output.plan, criteria: context.input.criteria }
                    : event.output.plan,
                  criteria: resolveCriteria(
                    context.input.criteria ?? event.output.plan.criteria,
                    context.input.defaultThresholds,
                    context.input.fallbackThreshold,
                  ),
                  index: 0,
                  budget: {
                    ...context.budget,
                    spent: addUsage(context.budget.spent, event.output.usage),
                    clock: Math.max(context.budget.clock, event.output.finishedAt),
                  },
                })),
                {
                  type: 'record',
                  params: ({ context }) => ({
                    type: 'plan.created',
                    payload: { plan: context.plan!, criteria: context.criteria, replan: context.replans },
                  }),
                },
              ],
            },
            onError: { target: '#run.failed', actions: 'noteError' },
          },
        },
        /** The plan is in: with the plan gate on, a person approves it before any step starts. */
        planned: {
          always: [{ guard: 'planGateOn', target: 'awaitingApproval' }, { target: '#run.stepping' }],
        },
        /**
         * Waits for a person's decision on the plan. Approved: the steps start. Rejected: back to
         * the planner with the reason while a replan is left (`maxReplans`), else the run aborts.
         */
        awaitingApproval: {
          invoke: {
            src: 'awaitApproval',
            input: ({ context }): ApprovalInput => ({
              gate: 'plan',
              stepId: null,
              stepNumber: null,
              attempt: null,
              summary: planSummary(context.plan!),
            }),
            onDone: [
              { guard: { type: 'approved', params: ({ event }) => event.output }, target: '#run.stepping' },
              {
                guard: 'replansLeft',
                target: 'gate',
                actions: assign(({ context, event }) => replanDisapproved(context, event.output.reason)),
              },
              { target: '#run.disapproved' },
            ],
            onError: { target: '#run.failed', actions: 'noteError' },
          },
        },
      },
    },
    stepping: {
      initial: 'next',
      states: {
        next: {
          always: [
            { guard: 'noMoreSteps', target: '#run.completed' },
            // A step starts with a model call: the budget guard of DESIGN 9 comes first.
            { guard: 'overBudget', target: '#run.stopped', actions: 'noteBudget' },
            {
              guard: 'stepAlreadyPassed',
              target: 'next',
              reenter: true,
              actions: assign({ index: ({ context }) => context.index + 1 }),
            },
            { target: 'running' },
          ],
        },
        running: {
          entry: {
            type: 'record',
            params: ({ context }) => {
              const s = context.plan!.steps[context.index]!;
              return {
                type: 'step.started',
                payload: { stepId: s.id, stepNumber: context.index + 1, title: s.title },
              };
            },
          },
          invoke: {
            src: 'runStep',
            input: ({ context }): StepInput => ({
              task: context.input.task,
              stepNumber: context.index + 1,
              plan: context.plan!,
              outline: outline(context.plan!),
              criteria: context.criteria,
              dependencies: dependencies(context, context.plan!.steps[context.index]!.dependsOn),
              maxContractRounds: context.input.maxContractRounds,
              maxRetriesPerStep: context.input.maxRetriesPerStep,
              // What will happen if this step is exhausted, as the `policyIs…` guards decide it.
              onStepExhausted: exhaustionPolicy(context.input.onStepExhausted, replansLeft(context)),
              replansLeft: replansLeft(context),
              approve: context.input.approve,
              budget: context.budget,
            }),
            onDone: [
              {
                guard: { type: 'stepPassed', params: ({ event }) => event.output },
                target: 'next',
                actions: assign(({ context, event }) => store(context, event.output, true)),
              },
              {
                guard: { type: 'stepStopped', params: ({ event }) => event.output },
                target: '#run.stopped',
                actions: assign(({ context, event }) => ({
                  ...store(context, event.output, false),
                  stoppedBy: event.output.stoppedBy,
                })),
              },
              {
                guard: { type: 'stepFailed', params: ({ event }) => event.output },
                target: '#run.failed',
                actions: assign(({ context, event }) => ({
                  ...store(context, event.output, false),
                  error: event.output.error,
                })),
              },
              {
                guard: { type: 'stepRejectedPlan', params: ({ event }) => event.output },
                target: '#run.planning',
                actions: [
                  assign(({ context, event }) => store(context, event.output, false)),
                  assign(({ context }) => replanAfter(context, 'plan_rejected')),
                ],
              },
              // The step was exhausted: the run follows `onStepExhausted`.
              {
                guard: 'policyIsAbort',
                target: '#run.aborted',
                actions: assign(({ context, event }) => store(context, event.output, false)),
              },
              {
                guard: 'policyIsReplan',
                target: '#run.planning',
                actions: [
                  assign(({ context, event }) => store(context, event.output, false)),
                  assign(({ context }) => replanAfter(context, 'step_exhausted')),
                ],
              },
              { target: 'next', actions: assign(({ context, event }) => store(context, event.output, true)) },
            ],
            onError: { target: '#run.failed', actions: 'noteError' },
          },
        },
      },
    },
    completed: {
      type: 'final',
      entry: { type: 'record', params: ({ context }) => completedEvent(context) },
      output: ({ context }) => runOutcome(context, 'completed'),
    },
    aborted: {
      type: 'final',
      entry: {
        type: 'record',
        params: ({ context }) =>
          failedEvent(
            context,
            'aborted',
            `step ${context.outcomes.at(-1)?.stepId} exhausted its attempts and onStepExhausted is "abort"`,
          ),
      },
      output: ({ context }) => runOutcome(context, 'aborted'),
    },
    disapproved: {
      type: 'final',
      entry: {
        type: 'record',
        params: ({ context }) =>
          failedEvent(context, 'aborted', 'a person rejected the plan and no replan is left (maxReplans)'),
      },
      output: ({ context }) => runOutcome(context, 'aborted'),
    },
    stopped: {
      type: 'final',
      entry: {
        type: 'record',
        params: ({ context }) => failedEvent(context, 'stopped', budgetMessage(context)),
      },
      output: ({ context }) => runOutcome(context, 'stopped'),
    },
    failed: {
      type: 'final',
      entry: {
        type: 'record',
        params: ({ context }) => failedEvent(context, 'failed', errorMessage(context)),
      },
      output: ({ context }) => runOutcome(context, 'failed'),
    },
    interrupted: {
      type: 'final',
      entry: { type: 'record', params: ({ context }) => interruptedEvent(context) },
      output: ({ context }) => runOutcome(context, 'interrupted'),
    },
  },
});
