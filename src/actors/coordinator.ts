import { createActor, type InspectionEvent, toPromise } from 'xstate';
import type { Bus } from '../bus/bus.js';
import { PUBLISHED } from '../bus/bus.js';
import { publishEvent, publishRequest, subscribeResults } from '../bus/channels.js';
import { runEventSubjects } from '../bus/subjects.js';
import type { AnyActorSystem } from '../machines/calls.js';
import type { RunInput, RunOutcome } from '../machines/run-machine.js';
import type { CallReport, RecordParams } from '../machines/types.js';
import type {
  ModelCall,
  Phase,
  PhaseTotals,
  RoleRequest,
  RoleResult,
  RunEvent,
  RunEventDraft,
  RunEventOf,
} from '../schemas/index.js';
import { addUsage, ROLE_OF_REQUEST, ZERO_USAGE } from '../schemas/index.js';
import {
  type Answer,
  provideCharts,
  type RequestDraft,
  RunClosedError,
  type RunScope,
} from './run-charts.js';

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

/**
 * ISO 8601 of epoch milliseconds, remembered for the last millisecond asked: a run records several
 * events within one millisecond, and formatting a date is among the dearer steps of recording one.
 */
function isoTimestamps(): (ms: number) => string {
  let lastMs = Number.NaN;
  let last = '';
  return (ms) => {
    if (ms !== lastMs) {
      lastMs = ms;
      last = new Date(ms).toISOString();
    }
    return last;
  };
}

/** Creates a coordinator on `bus`; one coordinator runs any number of runs at once. */
export function createCoordinator(options: CoordinatorOptions) {
  const { bus } = options;
  const clock = options.clock ?? Date.now;
  const timestamp = isoTimestamps();
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

  // The charts are provided once per coordinator, not per run (see `provideCharts`); each run's
  // actors reach their run through the actor system they belong to.
  const scopes = new WeakMap<AnyActorSystem, RunScope>();
  const machine = provideCharts((system) => scopes.get(system));

  function startRun(spec: RunSpec): RunHandle {
    const { runId } = spec;
    const eventSubject = runEventSubjects(runId);
    let seq = 0;
    const calls: ModelCall[] = [];
    const publishing: Promise<void>[] = [];
    let publishFailure: unknown = null;

    let closed = false;
    /** Requests of this run still waiting for their result. */
    const asked = new Set<string>();
    /** Publishes an event of this run; a request also goes on its role's work queue. */
    const publishRecorded = (event: RunEvent): Promise<void> => {
      let subject: string;
      try {
        subject = eventSubject(event.type);
      } catch (error) {
        return Promise.reject(error); // a run id that cannot be a subject token
      }
      return Object.hasOwn(ROLE_OF_REQUEST, event.type)
        ? publishRequest(bus, event as RoleRequest, subject)
        : publishEvent(bus, event, subject);
    };
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
        ts: timestamp(clock()),
        ...draft,
      } as RunEvent;
      const published = publishRecorded(event);
      // Published already (the in-process bus): nothing to wait for, nothing that can fail later.
      if (published !== PUBLISHED)
        publishing.push(
          published.catch((error: unknown) => {
            // A run whose events cannot be published has no record: stop it rather than go on unrecorded.
            publishFailure ??= error;
            actor.send({ type: 'interrupt', reason: `its events could not be published: ${String(error)}` });
          }),
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
    scopes.set(actor.system, {
      record,
      recordChart: (draft: RecordParams) => void record(completeDraft(draft, calls)),
      ask,
    });
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
