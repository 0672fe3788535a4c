import { assign, setup } from 'xstate';
import { describeError } from '../errors.js';
import { addUsage, ZERO_USAGE } from '../schemas/index.js';
import { type CallLogic, type CallName, callDeadline, notProvided } from './calls.js';
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
 * `maxReplans`) of `onStepExhausted: 'replan'` and of a failure the evaluator found to be the
 * plan's, budget gates before every model call, and an `interrupt` event for a clean stop. How a
 * step ended and the exhaustion policy are named guards; how the run ended is the final state it
 * reached, which records its closing event and gives the run's output. Free of I/O like the step
 * machine.
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
  delays: {
    callDeadline: ({ context }) => context.input.callTimeoutMs,
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
    /** Cancels the call the state invoked as `call` and fails it with a `CallTimeoutError` (`calls.ts`). */
    timeOutCall: (_, _params: { call: CallName }) => {},
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
      description:
        'The **planner** turns the task into a plan: a scope, at most `maxSteps` steps (each with its dependencies) and a graded rubric of criteria. The harness, not the planner, owns the thresholds: the plan\'s own, else `defaultThresholds`, else `fallbackThreshold`. After a failed step under `onStepExhausted: "replan"` the planner gets the previous plan, the failed step, the findings and feedback of its best attempt and the steps already done.',
      initial: 'gate',
      states: {
        gate: {
          description:
            'Budget check before the planner is called (`overBudget`); a call that would break a budget is never made.',
          always: [
            { guard: 'overBudget', target: '#run.stopped', actions: 'noteBudget' },
            { target: 'calling' },
          ],
        },
        calling: {
          description:
            'Invokes `plan`, the call to the planner role, and waits for it. Done (`done: plan`): the plan is recorded (`plan.created`) and goes to `planned`. Failed (`error: plan`): `failed`.',
          after: callDeadline('plan'),
          invoke: {
            id: 'plan',
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
        planned: {
          description:
            'With the plan gate on (`planGateOn`: `--approve plan`): `awaitingApproval`. Otherwise stepping starts at the first step.',
          always: [{ guard: 'planGateOn', target: 'awaitingApproval' }, { target: '#run.stepping' }],
        },
        awaitingApproval: {
          description:
            "Waits for a person's decision on the plan (invokes `awaitApproval`, recorded as `approval.requested`; the decision as `approval.decided`), for as long as it takes: on the terminal, through the API's `approve`, or `pge approve` on NATS. Approved (`approved`): stepping starts. Rejected: back to the planner with the reason (`replan.reason: disapproved`) while `replansLeft`, else `disapproved`. A run waiting here survives a restart of its process: it is waiting again once resumed.",
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
      description:
        "The plan's steps in order, each run to its end by the step machine before the next starts.",
      initial: 'next',
      states: {
        next: {
          description:
            "Chooses what comes next: no steps left, `completed`; the step's first model call would break a budget, `stopped`; a step whose id already passed (before a replan) is skipped; otherwise the step runs.",
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
          description:
            "Records `step.started` and invokes `runStep`, the step machine, with the step, the outputs of the steps it depends on and the budget spent so far. On its outcome, in this order: `stepPassed`, the next step; `stepStopped`, `stopped`; `stepFailed`, `failed`; `stepRejectedPlan` (the evaluator found the failure to be the plan's), back to `planning` with the evaluation's findings (`replan.reason: plan_rejected`); exhausted, the exhaustion policy: `policyIsAbort` goes to `aborted`, `policyIsReplan` (`replan` with a replan left, `maxReplans`) goes back to `planning`, and otherwise (`advance`, or no replans left) the step stays failed and the run goes on with the next step.",
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
              callTimeoutMs: context.input.callTimeoutMs,
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
      description:
        'Every step has run. The run passed if every step passed (under `advance` an exhausted step does not stop the run, but the run does not pass). Records `run.completed`.',
      type: 'final',
      entry: { type: 'record', params: ({ context }) => completedEvent(context) },
      output: ({ context }) => runOutcome(context, 'completed'),
    },
    aborted: {
      description:
        'A step exhausted its attempts under `onStepExhausted: "abort"`. Records `run.failed` (reason `aborted`).',
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
      description:
        'A person rejected the plan at its gate when no replan was left (`maxReplans`). Records `run.failed` (reason `aborted`): the run aborted.',
      type: 'final',
      entry: {
        type: 'record',
        params: ({ context }) =>
          failedEvent(context, 'aborted', 'a person rejected the plan and no replan is left (maxReplans)'),
      },
      output: ({ context }) => runOutcome(context, 'aborted'),
    },
    stopped: {
      description:
        'A budget check (here or in the step) found that the next model call would break a budget. Records `run.failed` (reason `budget`) naming the budget.',
      type: 'final',
      entry: {
        type: 'record',
        params: ({ context }) => failedEvent(context, 'stopped', budgetMessage(context)),
      },
      output: ({ context }) => runOutcome(context, 'stopped'),
    },
    failed: {
      description:
        'A call or the step machine failed: the model server or transport, an answer that stayed invalid after repairs, or the log. Records `run.failed` (reason `error`).',
      type: 'final',
      entry: {
        type: 'record',
        params: ({ context }) => failedEvent(context, 'failed', errorMessage(context)),
      },
      output: ({ context }) => runOutcome(context, 'failed'),
    },
    interrupted: {
      description:
        'The `interrupt` event (Ctrl-C or SIGTERM in the CLI) is taken in any state until the run has ended. Records `run.failed` (reason `interrupted`, with the reason the interrupt gave in `interruptReason`). Leaving the running state stops the call actor in flight, which cancels its request: the worker aborts the HTTP request to the model (`request.cancelled` is recorded before the closing event).',
      type: 'final',
      entry: { type: 'record', params: ({ context }) => interruptedEvent(context) },
      output: ({ context }) => runOutcome(context, 'interrupted'),
    },
  },
});
