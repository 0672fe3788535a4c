import { assign, setup } from 'xstate';
import type {
  Budgets,
  DependencyArtifact,
  ErrorInfo,
  Plan,
  PlanOutline,
  ReplanContext,
  ResolvedCriterion,
  RunStopReason,
} from '../schemas/index.js';
import { addUsage, ZERO_USAGE } from '../schemas/index.js';
import { type AnswerOf, type CallFailed, notProvided } from './calls.js';
import { type BudgetName, budgetBroken, resolveCriteria, toErrorInfo } from './guards.js';
import { stepMachine } from './step-machine.js';
import type { BudgetState, PlanInput, RecordParams, StepInput, StepOutcome } from './types.js';

/**
 * The run: planning → one step machine per plan step → summary, with the replan loop of
 * `onStepExhausted: 'replan'` (bounded by `maxReplans`), budget gates before every model call, and
 * an `interrupt` event for a clean stop. Free of I/O like the step machine.
 */

/** Input of the run machine: the task and the resolved settings of the run. */
export interface RunInput {
  task: string;
  logPath: string;
  maxSteps: number;
  maxRetriesPerStep: number;
  maxContractRounds: number;
  onStepExhausted: 'advance' | 'abort' | 'replan';
  maxReplans: number;
  defaultThresholds: Record<string, number>;
  fallbackThreshold: number;
  budgets: Budgets;
  /** Epoch ms the run started (the machine reads no clock). */
  startedAt: number;
}

/** How the run ended. */
export type RunStatus = 'completed' | 'aborted' | 'stopped' | 'failed' | 'interrupted';

/** Closing figures of a run, as `run.completed` / `run.failed` carry them. */
export interface RunTotals {
  passed: boolean;
  stepsPassed: number;
  stepsTotal: number;
  totalRetries: number;
  usage: BudgetState['spent'];
  durationMs: number;
  summary: string;
}

/** Output of the run machine. */
export interface RunOutcome {
  status: RunStatus;
  plan: Plan | null;
  criteria: ResolvedCriterion[];
  /** Every step run, in the order run (a step re-run after a replan appears again). */
  outcomes: StepOutcome[];
  replans: number;
  totals: RunTotals;
  stoppedBy: BudgetName | null;
  error: ErrorInfo | null;
}

/** Context of the run machine: its input as given, and what the run has done (`StepContext` says why nested). */
interface RunContext {
  input: RunInput;
  interruptReason: string | null;
  plan: Plan | null;
  criteria: ResolvedCriterion[];
  replans: number;
  replan: ReplanContext | null;
  index: number;
  outcomes: StepOutcome[];
  budget: BudgetState;
  status: RunStatus;
  stoppedBy: BudgetName | null;
  error: ErrorInfo | null;
}

/** The latest outcome of a step id, if it ran. */
function latest(context: RunContext, stepId: string): StepOutcome | undefined {
  for (let i = context.outcomes.length - 1; i >= 0; i--)
    if (context.outcomes[i]!.stepId === stepId) return context.outcomes[i];
  return undefined;
}

function outline(plan: Plan): PlanOutline {
  return { scope: plan.scope, steps: plan.steps.map((s) => ({ id: s.id, title: s.title })) };
}

function dependencies(context: RunContext, stepIds: readonly string[]): DependencyArtifact[] {
  return stepIds.flatMap((id) => {
    const o = latest(context, id);
    const work = o && o.best >= 0 ? o.attempts[o.best]!.work : null;
    return work ? [{ stepId: id, title: o!.title, output: work.output }] : [];
  });
}

/** Totals and the one-line summary, in the reference's words. */
export function runTotals(context: RunContext): RunTotals {
  const steps = context.plan?.steps ?? [];
  const stepsPassed = steps.filter((s) => latest(context, s.id)?.status === 'passed').length;
  const totalRetries = context.outcomes.reduce((n, o) => n + Math.max(0, o.attempts.length - 1), 0);
  const durationMs = Math.max(0, context.budget.clock - context.input.startedAt);
  const passed = context.status === 'completed' && steps.length > 0 && stepsPassed === steps.length;
  const head =
    context.status === 'completed'
      ? 'PGE Harness completed'
      : `PGE Harness stopped (${stopReason(context.status)})`;
  return {
    passed,
    stepsPassed,
    stepsTotal: steps.length,
    totalRetries,
    usage: context.budget.spent,
    durationMs,
    summary: `${head}: ${stepsPassed}/${steps.length} steps passed, ${totalRetries} total retries, ${(durationMs / 1000).toFixed(1)}s elapsed. Shared state: ${context.input.logPath}`,
  };
}

function stopReason(status: RunStatus): RunStopReason {
  if (status === 'stopped') return 'budget';
  if (status === 'aborted' || status === 'interrupted') return status;
  return 'error';
}

function stopMessage(context: RunContext): string {
  switch (context.status) {
    case 'stopped': {
      const b = context.budget;
      const limit = context.stoppedBy ? b.budgets[context.stoppedBy] : null;
      const used =
        context.stoppedBy === 'maxCostUsd'
          ? `$${b.spent.costUsd.toFixed(4)} spent`
          : context.stoppedBy === 'maxTokens'
            ? `${b.spent.promptTokens + b.spent.completionTokens} tokens used`
            : `${b.clock - b.startedAt} ms elapsed`;
      return `budget ${context.stoppedBy} (${limit}) would be exceeded by the next model call: ${used}`;
    }
    case 'aborted':
      return `step ${context.outcomes.at(-1)?.stepId} exhausted its attempts and onStepExhausted is "abort"`;
    case 'interrupted':
      return context.interruptReason
        ? `the run was interrupted: ${context.interruptReason}`
        : 'the run was interrupted';
    default:
      return context.error ? `${context.error.name}: ${context.error.message}` : 'the run failed';
  }
}

/** The closing event of a run that ended with `context.status`. */
function closingEvent(context: RunContext): RecordParams {
  const totals = runTotals(context);
  return context.status === 'completed'
    ? { type: 'run.completed', payload: totals }
    : {
        type: 'run.failed',
        payload: { ...totals, reason: stopReason(context.status), message: stopMessage(context) },
      };
}

/** Appends a finished step's outcome and takes over its spend. */
function store(context: RunContext, o: StepOutcome, advance: boolean): Partial<RunContext> {
  return {
    outcomes: [...context.outcomes, o],
    budget: { ...context.budget, spent: o.budget.spent, clock: o.budget.clock },
    index: advance ? context.index + 1 : context.index,
  };
}

/** The run statechart. Provide the `plan` call (see `calls.ts`), `runStep` (the step machine with its calls) and `record`. */
export const runMachine = setup({
  types: {
    context: {} as RunContext,
    input: {} as RunInput,
    output: {} as RunOutcome,
    /** `reason` says why in the closing event (a failed log write, a signal, an operator). */
    events: {} as { type: 'interrupt'; reason?: string } | AnswerOf<'plan'> | CallFailed,
  },
  actors: {
    runStep: stepMachine,
  },
  guards: {
    overBudget: ({ context }) => budgetBroken(context.budget) !== null,
    noMoreSteps: ({ context }) => context.index >= context.plan!.steps.length,
    stepAlreadyPassed: ({ context }) =>
      latest(context, context.plan!.steps[context.index]!.id)?.status === 'passed',
  },
  actions: {
    record: (_, _params: RecordParams) => {},
    plan: notProvided('plan') as (_: unknown, input: PlanInput) => void,
    noteBudget: assign(({ context }) => ({
      stoppedBy: budgetBroken(context.budget),
    })),
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
    status: 'failed',
    stoppedBy: null,
    error: null,
    interruptReason: null,
  }),
  initial: 'planning',
  output: ({ context }) => ({
    status: context.status,
    plan: context.plan,
    criteria: context.criteria,
    outcomes: context.outcomes,
    replans: context.replans,
    totals: runTotals(context),
    stoppedBy: context.stoppedBy,
    error: context.error,
  }),
  on: {
    interrupt: {
      target: '.interrupted',
      actions: assign({ interruptReason: ({ event }) => event.reason ?? null }),
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
          entry: {
            type: 'plan',
            params: ({ context }): PlanInput => ({
              task: context.input.task,
              maxSteps: context.input.maxSteps,
              replan: context.replan,
            }),
          },
          on: {
            'answer.plan': {
              target: '#run.stepping',
              actions: [
                assign(({ context, event }) => ({
                  plan: event.output.plan,
                  criteria: resolveCriteria(
                    event.output.plan.criteria,
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
            'answer.failed': {
              target: '#run.failed',
              actions: assign({ error: ({ event }) => toErrorInfo(event.error) }),
            },
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
              // What will happen if this step is exhausted: a spent replan budget means advance.
              onStepExhausted:
                context.input.onStepExhausted === 'replan' && context.replans >= context.input.maxReplans
                  ? 'advance'
                  : context.input.onStepExhausted,
              budget: context.budget,
            }),
            onDone: [
              {
                guard: ({ event }) => event.output.status === 'passed',
                target: 'next',
                actions: assign(({ context, event }) => store(context, event.output, true)),
              },
              {
                guard: ({ event }) => event.output.status === 'stopped',
                target: '#run.stopped',
                actions: assign(({ context, event }) => ({
                  ...store(context, event.output, false),
                  stoppedBy: event.output.stoppedBy,
                })),
              },
              {
                guard: ({ event }) => event.output.status === 'failed',
                target: '#run.failed',
                actions: assign(({ context, event }) => ({
                  ...store(context, event.output, false),
                  error: event.output.error,
                })),
              },
              {
                guard: ({ context }) => context.input.onStepExhausted === 'abort',
                target: '#run.aborted',
                actions: assign(({ context, event }) => store(context, event.output, false)),
              },
              {
                guard: ({ context }) =>
                  context.input.onStepExhausted === 'replan' && context.replans < context.input.maxReplans,
                target: '#run.planning',
                actions: [
                  assign(({ context, event }) => store(context, event.output, false)),
                  assign(({ context }) => {
                    const failed = context.outcomes.at(-1)!;
                    const best = failed.best >= 0 ? failed.attempts[failed.best]!.evaluation : null;
                    return {
                      replans: context.replans + 1,
                      replan: {
                        previousPlan: context.plan!,
                        failedStepId: failed.stepId,
                        findings: best?.findings ?? [],
                        actionableFeedback: best?.actionableFeedback ?? [],
                        completedStepIds: context
                          .plan!.steps.filter((s) => latest(context, s.id)?.status === 'passed')
                          .map((s) => s.id),
                      },
                    };
                  }),
                ],
              },
              { target: 'next', actions: assign(({ context, event }) => store(context, event.output, true)) },
            ],
            onError: {
              target: '#run.failed',
              actions: assign({ error: ({ event }) => toErrorInfo(event.error) }),
            },
          },
        },
      },
    },
    completed: {
      type: 'final',
      entry: [
        assign({ status: 'completed' }),
        { type: 'record', params: ({ context }) => closingEvent(context) },
      ],
    },
    aborted: {
      type: 'final',
      entry: [
        assign({ status: 'aborted' }),
        { type: 'record', params: ({ context }) => closingEvent(context) },
      ],
    },
    stopped: {
      type: 'final',
      entry: [
        assign({ status: 'stopped' }),
        { type: 'record', params: ({ context }) => closingEvent(context) },
      ],
    },
    failed: {
      type: 'final',
      entry: [
        assign({ status: 'failed' }),
        { type: 'record', params: ({ context }) => closingEvent(context) },
      ],
    },
    interrupted: {
      type: 'final',
      entry: [
        assign({ status: 'interrupted' }),
        { type: 'record', params: ({ context }) => closingEvent(context) },
      ],
    },
  },
});
