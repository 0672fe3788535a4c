import { LRUCache } from 'lru-cache';
import type { InspectionEvent } from 'xstate';
import { type AnyActorSystem, provideSession, type RunScope } from '../actors/run-charts.js';
import type { Bus } from '../bus/bus.js';
import { publishRejection, subscribeResults } from '../bus/channels.js';
import { subjects } from '../bus/subjects.js';
import { ConfigurationError, ResumeError } from '../errors.js';
import type { ResultRejectionReason, RoleResult } from '../schemas/index.js';
import type { RunTracing } from '../telemetry/run-tracing.js';
import type { RecordedRun } from './replay.js';
import type { LostWork, PendingCall, RunState } from './run-calls.js';
import type { Resumption } from './run-recorder.js';
import { type RunHandle, RunSession, type SessionDeps } from './run-session.js';
import { type ResumeOptions, type RunSpec, resumedSpec } from './run-spec.js';

/**
 * The coordinator owns its runs' statecharts: each run is a session chart
 * (`src/machines/session-machine.ts`) that invokes the run chart, which invokes the step chart;
 * the session's actors are wired here (`run-session.ts`, `run-recorder.ts`, `run-calls.ts`). It
 * is the only writer of the run's events: it stamps each one with `seq`, id and time and publishes
 * it; it turns every call actor of the chart into a request on the role's work queue and the
 * worker's result into an event of the session, then events and the actor's output.
 * Event ids are `<runId>-<seq>-<random>`: the random part (64 bits) keeps outsiders from
 * predicting them, since a request's id is its work item's `Nats-Msg-Id` (a forgery published
 * first under the next id would have JetStream drop the real one as a duplicate) and names the
 * call a result answers. A replay takes the ids from the recorded events. A request id is the
 * call's identity: a result is applied only to the call waiting for it, once, and only when it
 * names that call's run and comes from the role that serves the request; any other (a duplicate,
 * a late answer to a cancelled call, an answer to a request never made, one of the wrong run or
 * role) is reported as `result.rejected` and on `pge.errors.rejected.<reporter>`.
 */

/** Options of `createCoordinator`. */
export interface CoordinatorOptions {
  bus: Bus;
  /** Epoch milliseconds; the charts read time only through what the coordinator reports. */
  clock?: () => number;
  /** XState inspection (e.g. `@statelyai/inspect`), attached to each run's actor. */
  inspect?: (event: InspectionEvent) => void;
  /**
   * Tracing of the runs (`traceRuns`): asked for a run's trace context when it starts (recorded in
   * `run.started`) and told when it resumes, and given every event as the coordinator records it
   * (not those a replay takes from a log).
   */
  tracing?: RunTracing;
  /**
   * The result a worker stored for a request, if any (NATS: `PGE_RESULTS`). With it, a call that
   * has waited `resultCheckMs` for its result looks for it there, and again as often while it
   * waits: a result stored but missed on its way to the coordinator (its reading lost across a
   * server loss, say) is applied from the stream rather than left until the call's deadline.
   */
  storedResult?: (runId: string, requestId: string) => Promise<RoleResult | null>;
  /** Milliseconds between a call's looks for its stored result (default `RESULT_CHECK_MS`). */
  resultCheckMs?: number;
  /**
   * With `storedResult`: how a call's look tells that its work item was lost (NATS: the role's
   * queue idle at two looks in a row, no worker saying it held the item from one to the next nor
   * `confirmMs` later, and no result stored), and sends it again as a new item (`RunCalls`).
   * `resultCheckMs` must then be longer than the work items' ack wait and the workers' presence
   * TTL, so that a redelivered item is held by a worker that said so before the next look.
   */
  lostWork?: LostWork;
}

/**
 * How long a call waits for its result before the coordinator looks for it in the stream, and
 * how often it looks again: longer than most model calls, so that a deployment's calls cost no
 * lookups, and far below a call's deadline (30 min by default).
 */
export const RESULT_CHECK_MS = 60_000;

/** How many ended runs a coordinator remembers, to tell a late result of its own from another coordinator's. */
const ENDED_RUNS_REMEMBERED = 10_000;

/** Why `result` may not answer `call` although it names the call's request, or null when it may. */
function mismatch(call: PendingCall, result: RoleResult): ResultRejectionReason | null {
  if (result.runId !== call.runId) return 'wrong-run';
  if (result.role !== call.role) return 'wrong-role';
  return null;
}

/** What a rejected result is, in words for `pge.errors.rejected.<reporter>`. */
function rejectionProblem(result: RoleResult, reason: ResultRejectionReason, call?: PendingCall): string {
  const of = `${reason} result for request ${result.requestId} from ${result.worker}`;
  if (reason === 'wrong-run')
    return `${of}: it names run ${result.runId}, the request is run ${call?.runId}'s`;
  if (reason === 'wrong-role')
    return `${of}: it comes from a ${result.role}, the request is served by the ${call?.role}`;
  return `${of}: no call waits for it`;
}

/** What the coordinator's result routing works with. */
interface RoutingDeps {
  bus: Bus;
  timestamp: () => string;
  /** Every run's calls waiting for results, by request id: request ids are unique across runs. */
  pending: Map<string, PendingCall>;
  /** The runs this coordinator owns, by id. */
  active: Map<string, RunState>;
  /** Runs of this coordinator that have ended (not those taken over). */
  ended: LRUCache<string, true>;
}

/**
 * The coordinator's one subscription to the results of every run: each result is applied to the
 * call waiting for it, once, or reported (`result.rejected` and `pge.errors.rejected.<reporter>`).
 */
function routeResults({ bus, timestamp, pending, active, ended }: RoutingDeps) {
  /**
   * Reports a result that is not applied: none of the run's calls waits for it, or it names a
   * waiting call but not that call's run or role (`call`). Never applied, always said.
   */
  const reject = (
    result: RoleResult,
    run: RunState | null,
    reason: ResultRejectionReason,
    call?: PendingCall,
  ): void => {
    run?.recordIfOpen({
      type: 'result.rejected',
      payload: { requestId: result.requestId, worker: result.worker, reason },
    });
    publishRejection(bus, {
      subject: subjects.result(result.runId, result.role),
      problem: rejectionProblem(result, reason, call),
      ts: timestamp(),
    }).catch(() => {
      // The report is the only thing lost: the result itself was never applied.
    });
  };

  /**
   * Applies a result to the call waiting for it, once; false when none waits or the result does
   * not answer it (another run's, or from a role that does not serve the request).
   */
  const applyResult = (result: RoleResult): boolean => {
    const call = pending.get(result.requestId);
    // A call of a run that has just closed is not answered any more: its actor is being stopped.
    if (!call?.run.isOpen() || mismatch(call, result) !== null || !call.run.awaits(result)) return false;
    pending.delete(result.requestId);
    call.run.answered.add(result.requestId);
    call.run.answer(result);
    return true;
  };

  /**
   * Reports a result that names a waiting call but is not its answer (another run's, or from the
   * wrong role): in the call's run, which it tried to answer. The call goes on waiting for the
   * real answer. False when the result is no such thing.
   */
  const rejectMismatch = (result: RoleResult): boolean => {
    const call = pending.get(result.requestId);
    const wrong = call?.run.isOpen() ? mismatch(call, result) : null;
    if (call === undefined || wrong === null) return false;
    reject(result, call.run, wrong, call);
    return true;
  };

  // Only the results of this coordinator's runs are decoded: with several coordinators, each
  // would otherwise decode every run's. So a result on another run's subject that names a call
  // of this one's (a forgery) is that run's owner's to report, not this one's.
  const ours = (runId: string) => active.has(runId) || ended.has(runId);
  const subscription = subscribeResults(
    bus,
    '*',
    (result) => {
      if (applyResult(result) || rejectMismatch(result)) return;
      const run = active.get(result.runId);
      if (run !== undefined) {
        const reason = run.answered.has(result.requestId)
          ? 'duplicate'
          : run.cancelled.has(result.requestId)
            ? 'late'
            : 'unknown';
        reject(result, run, reason);
      } else if (ended.get(result.runId)) reject(result, null, 'late');
      // Otherwise the run is another coordinator's: its results are not ours to judge.
    },
    ours,
  );
  const applyStored = (result: RoleResult): void => {
    if (!applyResult(result)) rejectMismatch(result);
  };
  return { subscription, applyStored };
}

/** Creates a coordinator on `bus`; one coordinator runs any number of runs at once. */
export function createCoordinator(options: CoordinatorOptions) {
  const { bus } = options;
  const clock = options.clock ?? Date.now;
  const timestamp = isoTimestamps(clock);
  const pending = new Map<string, PendingCall>();
  const active = new Map<string, RunState>();
  const ended = new LRUCache<string, true>({ max: ENDED_RUNS_REMEMBERED });
  const results = routeResults({ bus, timestamp, pending, active, ended });
  const resultCheckMs = options.resultCheckMs ?? RESULT_CHECK_MS;
  if (!(resultCheckMs > 0))
    throw new ConfigurationError(`resultCheckMs must be above 0, got ${resultCheckMs}`);

  // The session is provided once per coordinator, not per run (see `provideSession`); each run's
  // actors reach their run through the actor system they belong to.
  const scopes = new WeakMap<AnyActorSystem, RunScope>();
  const deps: SessionDeps = {
    bus,
    clock,
    timestamp,
    tracing: options.tracing,
    pending,
    applyStored: results.applyStored,
    ...(options.storedResult === undefined
      ? {}
      : {
          lookUp: {
            storedResult: options.storedResult,
            everyMs: resultCheckMs,
            ...(options.lostWork === undefined ? {} : { lostWork: options.lostWork }),
          },
        }),
    machine: provideSession((system) => scopes.get(system)),
    scopes,
    inspect: options.inspect,
  };

  /** Opens a run's session and starts it; the run is this coordinator's until it ends. */
  function open(spec: RunSpec, resume: Resumption | null): RunHandle {
    const session = new RunSession(deps, spec, resume);
    active.set(spec.runId, session.state);
    return session.start((takenBy) => {
      scopes.delete(session.actor.system);
      active.delete(spec.runId);
      // Results of a run taken over are its new owner's to judge.
      if (takenBy === null) ended.set(spec.runId, true);
    });
  }

  /**
   * Starts a run. Throws `ConfigurationError` when this coordinator has a run of that id, or had
   * one: a run id is never reused, since every message id of a run derives from it.
   */
  function startRun(spec: RunSpec): RunHandle {
    if (active.has(spec.runId) || ended.get(spec.runId)) throw runIdTaken(spec.runId);
    return open(spec, null);
  }

  /**
   * Continues a run from its recorded events (see `replay.ts`): the charts start again with the
   * recorded input, every recorded request is answered from the recorded events (nothing is
   * published while they last, and each event the charts produce again must equal the recorded
   * one, else `done` rejects with `ResumeError`), then `run.resumed` is recorded and the run goes
   * on live, seq continuing from the last recorded event. A request recorded without its answer
   * is asked again (its recorded calls still count), and is queued again unless `resend` is false.
   */
  function resumeRun(recorded: RecordedRun, options: ResumeOptions): RunHandle {
    if (active.has(recorded.runId))
      throw new ResumeError(`run ${recorded.runId} is running on this coordinator`);
    return open(resumedSpec(recorded, options), { recorded, options });
  }

  return {
    startRun,
    resumeRun,
    /** Stops taking results; runs still going will not finish. */
    close(): void {
      results.subscription.unsubscribe();
    },
  };
}

/** The error for a run id that was used before: a run id is never reused. */
export function runIdTaken(runId: string): ConfigurationError {
  return new ConfigurationError(
    `run id ${runId} is taken: a run of that id has been started already, and a run id is never reused`,
  );
}

/**
 * ISO 8601 timestamps from `clock`, formatted once per millisecond: a run stamps several events
 * within one millisecond, and `toISOString` is the dearest step of stamping an event.
 */
function isoTimestamps(clock: () => number): (ms?: number) => string {
  let lastMs = Number.NaN;
  let last = '';
  return (ms = clock()) => {
    if (ms !== lastMs) {
      lastMs = ms;
      last = new Date(ms).toISOString();
    }
    return last;
  };
}

/** A coordinator as `createCoordinator` returns it. */
export type Coordinator = ReturnType<typeof createCoordinator>;
