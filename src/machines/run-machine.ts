import {
  type AnyActorRef,
  and,
  assign,
  enqueueActions,
  type SnapshotFrom,
  type StateValue,
  setup,
} from 'xstate';
import { describeError } from '../errors.js';
import { type StepInFlight, ZERO_USAGE } from '../schemas/index.js';
import { type CallLogic, type CallName, callDeadline, notProvided } from './calls.js';
import { budgetBroken } from './guards.js';
import {
  allStepsEnded,
  budgetMessage,
  cancelledEvent,
  carriedOutcomes,
  completedEvent,
  errorMessage,
  exhaustionPolicyOf,
  failedEvent,
  givenPlanDue,
  interruptedEvent,
  latest,
  planCreatedEvent,
  planSummary,
  type RunContext,
  type RunInput,
  type RunOutcome,
  type RunStopEvent,
  readyStep,
  readyStepCarried,
  replanAfter,
  replanDisapproved,
  replansLeft,
  runOutcome,
  started,
  stepActorId,
  stepCarriedEvent,
  stepInput,
  stepStartedEvent,
  store,
  takeGivenPlan,
  takePlan,
} from './run-context.js';
import { stepMachine } from './step-machine.js';
import {
  type ApprovalInput,
  type ApprovalOutput,
  charged,
  type PlanInput,
  type RecordParams,
  reportOfError,
  type StepOutcome,
  type StepSpentEvent,
} from './types.js';

/** The outcome a step's chart ended with, from its done event (`xstate.done.actor.step.<id>`). */
const stepOutput = (event: unknown): StepOutcome => (event as { output: StepOutcome }).output;
const outcomeOf = ({ event }: { event: unknown }) => stepOutput(event);
/** The replan a step's outcome asks for, for `askReplan`. */
const replanFor =
  (reason: 'plan_rejected' | 'step_exhausted') =>
  ({ event }: { event: unknown }) => ({ reason, stepId: stepOutput(event).stepId });

export type { RunInput, RunOutcome, RunStatus } from './run-context.js';

/**
 * The run: planning → one step machine per plan step → summary, with the replan loop (bounded by
 * `maxReplans`) of `onStepExhausted: 'replan'` and of a failure the evaluator found to be the
 * plan's, budget gates before every model call, and an `interrupt` event for a clean stop. How a
 * step ended and the exhaustion policy are named guards; how the run ended is the final state it
 * reached, which records its closing event and gives the run's output. Free of I/O like the step
 * machine.
 */

/** A chart's state value as one path: `evaluating`, `executing.refining`. */
function statePath(value: StateValue): string {
  if (typeof value === 'string') return value;
  return Object.entries(value)
    .map(([key, inner]) => (inner === undefined ? key : `${key}.${statePath(inner)}`))
    .join(',');
}

/**
 * The steps still running as the run stops, in plan order, each with the state its chart is in
 * and its attempt, for the closing event: read from the step actors, which stop with the run.
 */
function stepsInFlight(context: RunContext, self: AnyActorRef): StepInFlight[] {
  const children: Record<string, AnyActorRef | undefined> = self.getSnapshot().children;
  return (context.plan?.steps ?? []).flatMap((step, i) => {
    if (!context.running.includes(step.id)) return [];
    const snapshot = children[stepActorId(step.id)]?.getSnapshot() as
      | SnapshotFrom<typeof stepMachine>
      | undefined;
    if (snapshot?.status !== 'active') return [];
    const { attempt } = snapshot.context;
    return [{ stepId: step.id, stepNumber: i + 1, attempt, state: statePath(snapshot.value) }];
  });
}

/** The run statechart. Provide the `plan` actor (see `calls.ts`), `runStep` (the step machine with its calls) and `record`. */
export const runMachine = setup({
  types: {
    context: {} as RunContext,
    input: {} as RunInput,
    output: {} as RunOutcome,
    /** `reason` says why in the closing event (a failed log write, a signal, an operator). */
    events: {} as RunStopEvent | StepSpentEvent,
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
    /** Every step of the plan has ended, and none runs. */
    allStepsEnded: ({ context }) => allStepsEnded(context),
    /** A step of the plan has not started and every step it depends on has ended. */
    aStepIsReady: ({ context }) => readyStep(context) !== undefined,
    /** Fewer steps run than `maxParallelSteps`. */
    aSlotIsFree: ({ context }) => context.running.length < context.input.maxParallelSteps,
    /** The run was given its plan (`--plan`, `pge continue`) and has not taken it yet: no planner is asked. */
    planGiven: ({ context }) => givenPlanDue(context),
    /** The ready step was kept from the run this one continues: it is not run. */
    readyStepCarried: ({ context }) => readyStepCarried(context),
    /** The ready step's id passed before a replan: it is not run again. */
    readyStepPassed: ({ context }) => latest(context, readyStep(context)!.id)?.status === 'passed',
    /** A step asked for a replan, which waits for the steps still running. */
    replanPending: ({ context }) => context.pendingReplan !== null,
    noStepRunning: ({ context }) => context.running.length === 0,
    stepPassed: (_, step: StepOutcome) => step.status === 'passed',
    stepStopped: (_, step: StepOutcome) => step.status === 'stopped',
    stepFailed: (_, step: StepOutcome) => step.status === 'failed',
    /** The step ended on a failure the evaluator found to be the plan's (it had a replan left). */
    stepRejectedPlan: (_, step: StepOutcome) => step.status === 'plan_rejected',
    /** `onStepExhausted: 'abort'`: an exhausted step fails the run. */
    policyIsAbort: ({ context }) => exhaustionPolicyOf(context) === 'abort',
    /** `onStepExhausted: 'replan'` with a replan left: an exhausted step sends the run back to the planner. */
    policyIsReplan: ({ context }) => exhaustionPolicyOf(context) === 'replan',
    replansLeft: ({ context }) => replansLeft(context) > 0,
    /** A person approves the plan before any step starts (`approve` includes `plan`). */
    planGateOn: ({ context }) => context.input.approve?.includes('plan') === true,
    /** The person's decision at the gate was to approve. */
    approved: (_, decision: ApprovalOutput) => decision.decision === 'approve',
  },
  actions: {
    record: (_, _params: RecordParams) => {},
    /** Starts the ready step's chart; the steps running have company now. */
    startReadyStep: enqueueActions(({ context, enqueue }) => {
      const step = readyStep(context)!;
      const input = stepInput(context, step);
      for (const id of context.running)
        if (!context.company.includes(id)) enqueue.sendTo(stepActorId(id), { type: 'company' });
      enqueue.spawnChild('runStep', { id: stepActorId(step.id), input });
      enqueue.assign(started(context, step));
    }),
    /** Marks the ready step, passed before a replan, as ended without running it. */
    skipReadyStep: assign(({ context }) => ({ scheduled: [...context.scheduled, readyStep(context)!.id] })),
    /** A step's report of a call's cost: the run's budget counts it, and so do the other steps running. */
    takeSpend: enqueueActions(({ context, event, enqueue }) => {
      const spent = event as StepSpentEvent;
      enqueue.assign({ budget: charged(context.budget, spent) });
      const { usage, finishedAt } = spent;
      for (const id of context.running)
        if (id !== spent.stepId)
          enqueue.sendTo(stepActorId(id), { type: 'budget.others', usage, finishedAt });
    }),
    /** Keeps a step's outcome and its spend; its chart, ended, is let go. */
    storeStep: enqueueActions(({ context, enqueue }, outcome: StepOutcome) => {
      enqueue.assign(store(context, outcome));
      enqueue.stopChild(stepActorId(outcome.stepId));
    }),
    /** Notes the replan a step asked for (the first one, if two ask), to begin once none runs. */
    askReplan: assign(({ context }, asked: NonNullable<RunContext['pendingReplan']>) => ({
      pendingReplan: context.pendingReplan ?? asked,
    })),
    /** Goes back to the planner for the replan the step asked for. */
    replan: assign(({ context }) =>
      replanAfter(context, context.pendingReplan!.reason, context.pendingReplan!.stepId),
    ),
    /** Cancels the call the state invoked as `call` and fails it with a `CallTimeoutError` (`calls.ts`). */
    timeOutCall: (_, _params: { call: CallName }) => {},
    /** Notes the steps running as the run leaves `stepping` (none, unless it stops): its closing event lists them. */
    noteStepsInFlight: assign(({ context, self }) => ({ inFlight: stepsInFlight(context, self) })),
    noteBudget: assign(({ context }) => ({
      stoppedBy: budgetBroken(context.budget),
    })),
    /** Keeps a failed actor's error (the invoke's error event). */
    noteError: assign(({ context, event }) => {
      const error = (event as { error?: unknown }).error;
      const report = reportOfError(error);
      if (report === null) return { error: describeError(error) };
      return { error: describeError(error), budget: charged(context.budget, report) };
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
    scheduled: [],
    running: [],
    company: [],
    pendingReplan: null,
    inFlight: [],
    outcomes: carriedOutcomes(input, {
      budgets: input.budgets,
      spent: ZERO_USAGE,
      startedAt: input.startedAt,
      clock: input.startedAt,
    }),
    budget: { budgets: input.budgets, spent: ZERO_USAGE, startedAt: input.startedAt, clock: input.startedAt },
    stoppedBy: null,
    error: null,
    interruptReason: null,
    cancelled: null,
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
    cancel: {
      target: '.cancelled',
      actions: assign({ cancelled: ({ event }) => ({ by: event.by, reason: event.reason || null }) }),
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
            "A plan given to the run (`planGiven`: `--plan`, `pge continue`) is taken as the planner's would be, with no call, and recorded (`plan.created`, `given`); it goes to `planned`. Otherwise a budget check before the planner is called (`overBudget`); a call that would break a budget is never made.",
          always: [
            {
              guard: 'planGiven',
              target: 'planned',
              actions: [
                assign(({ context }) => takeGivenPlan(context)),
                { type: 'record', params: ({ context }) => planCreatedEvent(context, true) },
              ],
            },
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
                  ...takePlan(context, event.output.plan),
                  scheduled: [],
                  running: [],
                  company: [],
                  budget: charged(context.budget, event.output),
                })),
                { type: 'record', params: ({ context }) => planCreatedEvent(context, false) },
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
        "The plan's steps, each run by its own step chart (`runStep`, a child actor `step.<id>`, whose end is `done: step.*`), side by side along the plan's dependencies: a step is ready once every step it depends on has ended, and starts while fewer than `maxParallelSteps` run. With one at a time they run in plan order. A step's outcome, as it ends: `stepPassed`, the next ready steps start; `stepStopped`, `stopped`; `stepFailed`, `failed`; `stepRejectedPlan` (the evaluator found the failure to be the plan's), a replan with the evaluation's findings (`replan.reason: plan_rejected`); exhausted, the exhaustion policy: `policyIsAbort` goes to `aborted`, `policyIsReplan` (`replan` with a replan left, `maxReplans`) replans, and otherwise (`advance`, or no replans left) the step stays failed and its dependents run with its best attempt. A replan waits for the steps still running (`draining`). Leaving for a final state stops every step still running, and their calls; a closing `run.failed` lists them, each with its chart's state (`inFlight`).",
      initial: 'scheduling',
      exit: 'noteStepsInFlight',
      on: {
        'step.spent': { actions: 'takeSpend' },
        'xstate.done.actor.step.*': [
          {
            guard: { type: 'stepPassed', params: outcomeOf },
            target: '.scheduling',
            actions: { type: 'storeStep', params: outcomeOf },
          },
          {
            guard: { type: 'stepStopped', params: outcomeOf },
            target: '#run.stopped',
            actions: [
              { type: 'storeStep', params: outcomeOf },
              assign({ stoppedBy: ({ event }) => stepOutput(event).stoppedBy }),
            ],
          },
          {
            guard: { type: 'stepFailed', params: outcomeOf },
            target: '#run.failed',
            actions: [
              { type: 'storeStep', params: outcomeOf },
              assign({ error: ({ event }) => stepOutput(event).error }),
            ],
          },
          {
            guard: { type: 'stepRejectedPlan', params: outcomeOf },
            target: '.scheduling',
            actions: [
              { type: 'storeStep', params: outcomeOf },
              {
                type: 'askReplan',
                params: replanFor('plan_rejected'),
              },
            ],
          },
          // The step was exhausted: the run follows `onStepExhausted`.
          {
            guard: 'policyIsAbort',
            target: '#run.aborted',
            actions: { type: 'storeStep', params: outcomeOf },
          },
          {
            guard: 'policyIsReplan',
            target: '.scheduling',
            actions: [
              { type: 'storeStep', params: outcomeOf },
              {
                type: 'askReplan',
                params: replanFor('step_exhausted'),
              },
            ],
          },
          {
            target: '.scheduling',
            actions: { type: 'storeStep', params: outcomeOf },
          },
        ],
        'xstate.error.actor.step.*': { target: '#run.failed', actions: 'noteError' },
      },
      states: {
        scheduling: {
          description:
            'Chooses what comes next, in this order: a replan asked for (`replanPending`), `draining`; every step ended (`allStepsEnded`), `completed`; a step ready (`aStepIsReady`) that was kept from the run this one continues (`readyStepCarried`): it is skipped (`step.carried`), as it needs no call; a ready step with a slot free (`aSlotIsFree`): its first model call would break a budget (`overBudget`), `stopped`; its id passed before a replan (`readyStepPassed`), it is skipped; otherwise it starts (`step.started`). Then again, until no step can start: `waiting`.',
          always: [
            { guard: 'replanPending', target: 'draining' },
            { guard: 'allStepsEnded', target: '#run.completed' },
            // A step starts with a model call: the budget guard of DESIGN 9 comes first.
            {
              guard: and(['aStepIsReady', 'aSlotIsFree', 'overBudget']),
              target: '#run.stopped',
              actions: 'noteBudget',
            },
            {
              guard: and(['aStepIsReady', 'readyStepCarried']),
              target: 'scheduling',
              reenter: true,
              actions: [
                { type: 'record', params: ({ context }) => stepCarriedEvent(context) },
                'skipReadyStep',
              ],
            },
            {
              guard: and(['aStepIsReady', 'aSlotIsFree', 'readyStepPassed']),
              target: 'scheduling',
              reenter: true,
              actions: 'skipReadyStep',
            },
            {
              guard: and(['aStepIsReady', 'aSlotIsFree']),
              target: 'scheduling',
              reenter: true,
              actions: [
                { type: 'record', params: ({ context }) => stepStartedEvent(context) },
                'startReadyStep',
              ],
            },
            { target: 'waiting' },
          ],
        },
        waiting: {
          description:
            'Steps are running and no other can start (none ready, or every slot taken): waits for one to end.',
        },
        draining: {
          description:
            "A step asked for a replan: no step starts; once the steps still running have ended (`noStepRunning`), back to `planning` with the failed step's findings. Steps that passed stay passed.",
          always: { guard: 'noStepRunning', target: '#run.planning', actions: 'replan' },
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
    cancelled: {
      description:
        'The `cancel` event (`pge cancel`, `RunHandle.cancel`: who asked, and why) is taken in any state until the run has ended. As `interrupted`, it stops every step running and cancels their calls; records `run.failed` (reason `cancelled`, with who and why in `cancelled`).',
      type: 'final',
      entry: { type: 'record', params: ({ context }) => cancelledEvent(context) },
      output: ({ context }) => runOutcome(context, 'cancelled'),
    },
  },
});
