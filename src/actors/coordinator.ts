import { type ActorSystem, createActor, fromPromise, type InspectionEvent, toPromise } from 'xstate';
import type { Bus } from '../bus/bus.js';
import { publishEvent, publishRequest, subscribeResults } from '../bus/channels.js';
import { PgeError } from '../errors.js';
import type { RunInput, RunOutcome } from '../machines/run-machine.js';
import { runMachine } from '../machines/run-machine.js';
import { stepMachine } from '../machines/step-machine.js';
import type {
  CallReport,
  ContractInput,
  ContractReviewInput,
  EvaluateOutput,
  EvaluationInput,
  PlanInput,
  PlanOutput,
  ProposalOutput,
  RecordParams,
  ReviewOutput,
  WorkInput,
  WorkOutput,
} from '../machines/types.js';
import type {
  ErrorInfo,
  ModelCall,
  Phase,
  PhaseTotals,
  RoleRequest,
  RoleResult,
  RoleSuccess,
  RunEvent,
  RunEventDraft,
  RunEventOf,
} from '../schemas/index.js';
import { addUsage, ROLE_OF_REQUEST, truncatePlan, ZERO_USAGE } from '../schemas/index.js';

/**
 * The coordinator owns a run's statechart. It is the only writer of the run's events: it stamps
 * each one with `seq`, id and time and publishes it; it turns every role call of the chart into a
 * request on the role's work queue and the worker's result into events and a machine event.
 * Request ids are `<runId>-<seq>`, so a replay of the same results yields the same events.
 */

/** Settings of one run, as the API resolves them. */
export interface RunSpec extends Omit<RunInput, 'startedAt'> {
  runId: string;
  models: { planner: string; generator: string; evaluator: string };
}

/** The options a run's settings are taken from (a subset of the API's resolved options). */
export type RunSettingsSource = Pick<
  RunInput,
  | 'maxSteps'
  | 'maxRetriesPerStep'
  | 'maxContractRounds'
  | 'onStepExhausted'
  | 'maxReplans'
  | 'defaultThresholds'
  | 'fallbackThreshold'
> & { maxCostUsd?: number | undefined; maxTokens?: number | undefined; maxDurationMs?: number | undefined };

/** A run's settings from options: the harness bounds and the budgets (`null` is no limit). */
export function runSettingsOf(o: RunSettingsSource): Omit<RunSpec, 'runId' | 'task' | 'logPath' | 'models'> {
  return {
    maxSteps: o.maxSteps,
    maxRetriesPerStep: o.maxRetriesPerStep,
    maxContractRounds: o.maxContractRounds,
    onStepExhausted: o.onStepExhausted,
    maxReplans: o.maxReplans,
    defaultThresholds: o.defaultThresholds,
    fallbackThreshold: o.fallbackThreshold,
    budgets: {
      maxCostUsd: o.maxCostUsd ?? null,
      maxTokens: o.maxTokens ?? null,
      maxDurationMs: o.maxDurationMs ?? null,
    },
  };
}

/** Calls, tokens, cost and model time per phase, in phase order, over `calls`. */
export function phaseTotals(calls: readonly ModelCall[]): PhaseTotals[] {
  const phases: Phase[] = ['plan', 'contract', 'contract_review', 'work', 'evaluation'];
  return phases.map((phase) => {
    const of = calls.filter((c) => c.phase === phase);
    return {
      phase,
      calls: of.length,
      promptTokens: of.reduce((n, c) => n + c.promptTokens, 0),
      completionTokens: of.reduce((n, c) => n + c.completionTokens, 0),
      costUsd: of.reduce((n, c) => n + c.costUsd, 0),
      latencyMs: of.reduce((n, c) => n + c.latencyMs, 0),
    };
  });
}

/** A chart's event, completed with what only the coordinator knows: the per-phase table. */
function completeDraft(draft: RecordParams, calls: readonly ModelCall[]): RunEventDraft {
  if (draft.type === 'run.completed')
    return { type: draft.type, payload: { ...draft.payload, byPhase: phaseTotals(calls) } };
  if (draft.type === 'run.failed')
    return { type: draft.type, payload: { ...draft.payload, byPhase: phaseTotals(calls) } };
  return draft;
}

/** A run in progress. */
export interface RunHandle {
  readonly runId: string;
  /** Resolves with the outcome once the chart is done and every event is published. */
  readonly done: Promise<RunOutcome>;
  /** Every model call of the run so far, repairs included. */
  readonly calls: readonly ModelCall[];
  /** Ends the run as interrupted, `reason` going into its closing event; a call in flight is abandoned. */
  interrupt(reason?: string): void;
}

/** Options of `createCoordinator`. */
export interface CoordinatorOptions {
  bus: Bus;
  /** Epoch milliseconds; the charts read time only through what the coordinator reports. */
  clock?: () => number;
  /** XState inspection (e.g. `@statelyai/inspect`), attached to each run's actor. */
  inspect?: (event: InspectionEvent) => void;
}

/** Thrown into an actor that answers after its run ended; the stopped chart never sees it. */
class RunClosedError extends PgeError {
  readonly retryable = false;
}

/** A role failure re-thrown into the chart, keeping the worker's name and retryability. */
class RoleError extends PgeError {
  readonly retryable: boolean;
  constructor(info: ErrorInfo) {
    super(info.message);
    this.name = info.name;
    this.retryable = info.retryable;
  }
}

type Success<P extends RoleSuccess['phase']> = Extract<RoleSuccess, { phase: P }>['output'];

// biome-ignore lint/suspicious/noExplicitAny: xstate's own AnyActorSystem, which it does not export
type AnyActorSystem = ActorSystem<any>;

/** The draft of a request event: its type and payload. */
type RequestDraft = RoleRequest extends infer R
  ? R extends RoleRequest
    ? Pick<R, 'type' | 'payload'>
    : never
  : never;

/** A request, the result its worker sent back, and what the call cost. */
interface Answer {
  request: RoleRequest;
  result: RoleResult['result'];
  report: CallReport;
}

/** The output of a successful answer of `phase`; records `role.failed` and throws for a failed one. */
function ok<P extends RoleSuccess['phase']>(
  run: { record<T extends RunEventDraft>(draft: T): unknown },
  answer: Answer,
  phase: P,
  role: RoleResult['role'],
): Success<P> {
  const { result } = answer;
  if (result.status === 'error') {
    run.record({
      type: 'role.failed',
      payload: {
        requestId: answer.request.id,
        role,
        phase: result.phase,
        error: result.error,
        raw: result.raw,
      },
    });
    throw new RoleError(result.error);
  }
  if (result.phase !== phase)
    throw new RoleError({ name: 'ProtocolError', message: `expected a ${phase} result`, retryable: false });
  return result.output as Success<P>;
}

/** Creates a coordinator on `bus`; one coordinator runs any number of runs at once. */
export function createCoordinator(options: CoordinatorOptions) {
  const { bus } = options;
  const clock = options.clock ?? Date.now;
  // One subscription for the results of every run: request ids are unique across runs, and a
  // subscription per run would make the bus re-match subjects each time a run starts or ends.
  const pending = new Map<string, (result: RoleResult) => void>();
  const results = subscribeResults(bus, '*', (result) => {
    const resolve = pending.get(result.requestId);
    // A result nobody waits for is a duplicate (a redelivered request) or belongs to another
    // coordinator's run; the first one counted.
    if (resolve) {
      pending.delete(result.requestId);
      resolve(result);
    }
  });

  /** What the charts' actors and `record` action of one run work with, found through the run's actor system. */
  interface RunScope {
    record<T extends RunEventDraft>(draft: T): RunEventOf<T['type']>;
    ask(draft: RequestDraft): Promise<Answer>;
    readonly calls: ModelCall[];
  }
  // The charts are provided once per coordinator, not per run: `provide` builds a new machine,
  // whose state nodes and transition caches would otherwise be rebuilt for every run. Each run's
  // actors reach their run through the actor system they belong to.
  const scopes = new WeakMap<AnyActorSystem, RunScope>();
  const scopeOf = (system: AnyActorSystem): RunScope => {
    const scope = scopes.get(system);
    if (scope === undefined) throw new RunClosedError('an actor of a run this coordinator does not know');
    return scope;
  };
  const recordAction = ({ system }: { system: AnyActorSystem }, draft: RecordParams): void => {
    const scope = scopeOf(system);
    scope.record(completeDraft(draft, scope.calls));
  };

  const steps = stepMachine.provide({
    actors: {
      proposeContract: fromPromise<ProposalOutput, ContractInput>(async ({ input, system }) => {
        const run = scopeOf(system);
        const answer = await run.ask({
          type: 'step.contract.requested',
          payload: { phase: 'contract', input },
        });
        const proposal = ok(run, answer, 'contract', 'generator');
        run.record({
          type: 'step.contract.proposed',
          payload: { stepId: input.step.id, stepNumber: input.stepNumber, round: input.round, proposal },
        });
        return { proposal, ...answer.report };
      }),
      reviewContract: fromPromise<ReviewOutput, ContractReviewInput>(async ({ input, system }) => {
        const run = scopeOf(system);
        const answer = await run.ask({
          type: 'step.review.requested',
          payload: { phase: 'contract_review', input },
        });
        const review = ok(run, answer, 'contract_review', 'evaluator');
        run.record({
          type: 'step.contract.reviewed',
          payload: { stepId: input.step.id, stepNumber: input.stepNumber, round: input.round, review },
        });
        return { review, ...answer.report };
      }),
      doWork: fromPromise<WorkOutput, WorkInput>(async ({ input, system }) => {
        const run = scopeOf(system);
        const answer = await run.ask({ type: 'step.work.requested', payload: { phase: 'work', input } });
        const ref = { stepId: input.step.id, stepNumber: input.stepNumber, attempt: input.attempt };
        if (answer.result.status === 'error' && answer.result.error.name === 'InvalidOutputError') {
          run.record({
            type: 'step.work.invalid',
            payload: { ...ref, problem: answer.result.error.message, raw: answer.result.raw },
          });
          return { work: null, problem: answer.result.error.message, ...answer.report };
        }
        const work = ok(run, answer, 'work', 'generator');
        run.record({ type: 'step.work.completed', payload: { ...ref, work } });
        return { work, problem: null, ...answer.report };
      }),
      evaluateWork: fromPromise<EvaluateOutput, EvaluationInput>(async ({ input, system }) => {
        const run = scopeOf(system);
        const answer = await run.ask({
          type: 'step.evaluation.requested',
          payload: { phase: 'evaluation', input },
        });
        const ref = { stepId: input.step.id, stepNumber: input.stepNumber, attempt: input.attempt };
        if (answer.result.status === 'error' && answer.result.error.name === 'InvalidOutputError') {
          run.record({
            type: 'step.evaluation.invalid',
            payload: { ...ref, problem: answer.result.error.message, raw: answer.result.raw },
          });
          return { evaluation: null, problem: answer.result.error.message, ...answer.report };
        }
        const evaluation = ok(run, answer, 'evaluation', 'evaluator');
        run.record({ type: 'step.evaluation.completed', payload: { ...ref, evaluation } });
        return { evaluation, problem: null, ...answer.report };
      }),
    },
    actions: { record: recordAction },
  });

  const machine = runMachine.provide({
    actors: {
      plan: fromPromise<PlanOutput, PlanInput>(async ({ input, system }) => {
        const run = scopeOf(system);
        const answer = await run.ask({ type: 'plan.requested', payload: { phase: 'plan', input } });
        const answered = ok(run, answer, 'plan', 'planner');
        // Cut here too: a planner written in another language may not (DESIGN 1 is the harness's).
        const cut = answered.truncation ? answered : truncatePlan(answered.plan, input.maxSteps);
        const { plan, truncation } = cut;
        if (truncation)
          run.record({ type: 'plan.truncated', payload: { ...truncation, to: plan.steps.length } });
        return { plan, ...answer.report };
      }),
      runStep: steps,
    },
    actions: { record: recordAction },
  });

  function startRun(spec: RunSpec): RunHandle {
    const { runId } = spec;
    let seq = 0;
    const calls: ModelCall[] = [];
    const publishing: Promise<void>[] = [];
    let publishFailure: unknown = null;

    let closed = false;
    /** Requests of this run still waiting for their result. */
    const asked = new Set<string>();
    const record = <T extends RunEventDraft>(draft: T): RunEventOf<T['type']> => {
      // After the closing event nothing more belongs to the run: a call that was in flight when
      // the run was interrupted answers into the void rather than behind the log's last section.
      if (closed) throw new RunClosedError(`run ${runId} has ended`);
      if (draft.type === 'run.completed' || draft.type === 'run.failed') closed = true;
      seq += 1;
      const event = {
        id: `${runId}-${seq}`,
        runId,
        seq,
        ts: new Date(clock()).toISOString(),
        ...draft,
      } as RunEvent;
      const isRequest = Object.hasOwn(ROLE_OF_REQUEST, event.type);
      publishing.push(
        (isRequest ? publishRequest(bus, event as RoleRequest) : publishEvent(bus, event)).catch(
          (error: unknown) => {
            // A run whose events cannot be published has no record: stop it rather than go on unrecorded.
            publishFailure ??= error;
            actor.send({ type: 'interrupt', reason: `its events could not be published: ${String(error)}` });
          },
        ),
      );
      return event as RunEventOf<T['type']>;
    };

    /** Sends a request and waits for its result; records the calls it cost. */
    async function ask(draft: RequestDraft): Promise<Answer> {
      const request = record(draft as RunEventDraft) as RoleRequest;
      // `record` published the request both as an event and on the role's work queue.
      asked.add(request.id);
      const result = await new Promise<RoleResult>((resolve) => pending.set(request.id, resolve));
      asked.delete(request.id);
      let usage = ZERO_USAGE;
      for (const call of result.calls) {
        usage = addUsage(usage, {
          promptTokens: call.promptTokens,
          completionTokens: call.completionTokens,
          costUsd: call.costUsd,
          calls: 1,
        });
        calls.push(call);
        record({
          type: 'model.call.completed',
          payload: { requestId: request.id, worker: result.worker, ...call },
        });
      }
      const report: CallReport = { usage, finishedAt: clock() };
      return { request, result: result.result, report };
    }

    const startedAt = clock();
    const { runId: _runId, models, ...settings } = spec;
    record({
      type: 'run.started',
      payload: {
        task: spec.task,
        logPath: spec.logPath,
        settings: {
          maxSteps: settings.maxSteps,
          maxRetriesPerStep: settings.maxRetriesPerStep,
          maxContractRounds: settings.maxContractRounds,
          onStepExhausted: settings.onStepExhausted,
          maxReplans: settings.maxReplans,
          budgets: settings.budgets,
          models,
        },
      },
    });
    const actor = createActor(machine, {
      input: { ...settings, startedAt },
      ...(options.inspect ? { inspect: options.inspect } : {}),
    });
    scopes.set(actor.system, { record, ask, calls });
    actor.start();

    const done = (async () => {
      try {
        const outcome = await toPromise(actor);
        await Promise.all(publishing);
        if (publishFailure) throw publishFailure;
        return outcome;
      } finally {
        // An interrupted run leaves requests nobody will answer any more: stop waiting for them.
        for (const id of asked) pending.delete(id);
        scopes.delete(actor.system);
      }
    })();

    return {
      runId,
      done,
      calls,
      interrupt: (reason?: string) =>
        actor.send(reason ? { type: 'interrupt', reason } : { type: 'interrupt' }),
    };
  }

  return {
    startRun,
    /** Stops taking results; runs still going will not finish. */
    close(): void {
      results.unsubscribe();
    },
  };
}

/** A coordinator as `createCoordinator` returns it. */
export type Coordinator = ReturnType<typeof createCoordinator>;
