import { LRUCache } from 'lru-cache';
import { createActor, type InspectionEvent, toPromise } from 'xstate';
import { type Bus, type MessageHeaders, TRACEPARENT_HEADER } from '../bus/bus.js';
import {
  enqueueWork,
  publishCancel,
  publishEvent,
  publishRejection,
  publishRequest,
  subscribeResults,
} from '../bus/channels.js';
import { subjects } from '../bus/subjects.js';
import {
  CallTimeoutError,
  ConfigurationError,
  describeError,
  EventSeqTakenError,
  ResumeError,
  RunTakenOverError,
} from '../errors.js';
import type { RunInput, RunOutcome } from '../machines/run-machine.js';
import type { ApprovalInput, ApprovalOutput, CallReport, RecordParams } from '../machines/types.js';
import type {
  ApprovalDecision,
  ApprovalGate,
  ApprovalTimeoutPolicy,
  ModelCall,
  Phase,
  PhaseTotals,
  ResultRejectionReason,
  Role,
  RoleRequest,
  RoleResult,
  RunActing,
  RunEvent,
  RunEventDraft,
  RunEventOf,
  Usage,
} from '../schemas/index.js';
import { addUsage, OPTION_DEFAULTS, PHASES, ROLE_OF_REQUEST, ZERO_USAGE } from '../schemas/index.js';
import type { RunTracing } from '../telemetry/run-tracing.js';
import { traceSafely } from '../telemetry/trace-safely.js';
import { unguessableId } from '../unguessable-id.js';
import { type RecordedRun, Replay } from './replay.js';
import {
  type AnyActorSystem,
  provideCharts,
  type RequestDraft,
  type RoleReply,
  RunClosedError,
  type RunScope,
} from './run-charts.js';

/**
 * The coordinator owns a run's statechart. It is the only writer of the run's events: it stamps
 * each one with `seq`, id and time and publishes it; it turns every call actor of the chart into a
 * request on the role's work queue and the worker's result into events and the actor's output.
 * Event ids are `<runId>-<seq>-<random>`: the random part (64 bits) keeps outsiders from
 * predicting them, since a request's id is its work item's `Nats-Msg-Id` (a forgery published
 * first under the next id would have JetStream drop the real one as a duplicate) and names the
 * call a result answers. A replay takes the ids from the recorded events. A request id is the
 * call's identity: a result is applied only to the call waiting for it, once, and only when it
 * names that call's run and comes from the role that serves the request; any other (a duplicate,
 * a late answer to a cancelled call, an answer to a request never made, one of the wrong run or
 * role) is reported as `result.rejected` and on `pge.errors.rejected.<reporter>`.
 */

/** Settings of one run, as the API resolves them. */
export interface RunSpec extends Omit<RunInput, 'startedAt'> {
  runId: string;
  models: { planner: string; generator: string; evaluator: string };
  /** Milliseconds each call may take, from its request to its result, before it fails (`RunSettings`). */
  callTimeoutMs: number;
  /** How long a gate waits for a person, and what its deadline does; null: as long as it takes. */
  approvalDeadline: { timeoutMs: number; policy: ApprovalTimeoutPolicy } | null;
  /** The acting roles' tools, validators and workspace, when this process holds the workers (`run.started`'s `acting`). */
  acting?: RunActing;
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
> & {
  criteria?: RunInput['criteria'] | undefined;
  approve?: RunInput['approve'] | undefined;
  maxCostUsd?: number | undefined;
  maxTokens?: number | undefined;
  maxDurationMs?: number | undefined;
  callTimeoutMs: number;
  approvalTimeoutMs?: number | null | undefined;
  onApprovalTimeout?: ApprovalTimeoutPolicy | undefined;
};

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
    criteria: o.criteria ?? null,
    approve: o.approve ?? [],
    budgets: {
      maxCostUsd: o.maxCostUsd ?? null,
      maxTokens: o.maxTokens ?? null,
      maxDurationMs: o.maxDurationMs ?? null,
    },
    callTimeoutMs: o.callTimeoutMs,
    approvalDeadline:
      o.approvalTimeoutMs === undefined || o.approvalTimeoutMs === null
        ? null
        : { timeoutMs: o.approvalTimeoutMs, policy: o.onApprovalTimeout ?? 'stop' },
  };
}

/** Calls, tokens, cost and model time per phase, in phase order, over `calls`. */
export function phaseTotals(calls: readonly ModelCall[]): PhaseTotals[] {
  return PHASES.map((phase) => {
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
  /** Ends the run as interrupted, `reason` going into its closing event; a call in flight is cancelled. */
  interrupt(reason?: string): void;
  /**
   * A person's decision at the gate the run waits at; false (and nothing done) when it waits at
   * no gate of that kind, or at another request than `requestId` (when given).
   */
  decide(gate: ApprovalGate, decision: ApprovalDecision, requestId?: string): boolean;
  /** The gate the run waits at, with its request's id, or null. */
  waitingAt(): { gate: ApprovalGate; requestId: string } | null;
  /**
   * Lets the run go, because `owner` took it over (this coordinator lost its lease): the chart
   * stops, nothing more is recorded or published (the call in flight is not cancelled: the new
   * owner waits for its result), and `done` rejects with `RunTakenOverError`.
   */
  abandon(owner: string): void;
}

/** Options of a coordinator's `resumeRun`. */
export interface ResumeOptions {
  /** Who continues the run, for `run.resumed`: `<host>:<pid>` of an embedded process, a coordinator's id. */
  owner: string;
  /** The log the run continues in, if not the one its `run.started` names (the file was moved). */
  logPath?: string;
  /**
   * Queue again the request in flight at the crash (default true). An embedded run's queue died
   * with its process; a coordinator taking a run over on NATS may find the request still queued.
   */
  resend?: boolean;
  /** Bytes of a torn last write removed from the log before it was continued, for `run.resumed`. */
  discardedBytes?: number;
  /** Thresholds for a log whose `run.started` does not record them (written before they were recorded). */
  defaults?: Pick<RunSpec, 'defaultThresholds' | 'fallbackThreshold'>;
  /**
   * The result a worker already stored for a request, if any (NATS: `PGE_RESULTS`). The request in
   * flight when the run's last owner died may have been answered after it died: that answer is
   * applied, and no model is asked again.
   */
  storedResult?: (requestId: string) => Promise<RoleResult | null>;
  /**
   * Replays the recorded events and never goes live (`pge replay`): where the charts go on past
   * the log, or make a request the log does not answer, the run ends and `done` rejects with a
   * `ReplayDivergence`. Nothing is asked of a worker.
   */
  replayOnly?: boolean;
}

/** The settings of a resumed run: those its `run.started` recorded. */
export function resumedSpec({ runId, started }: RecordedRun, options: ResumeOptions): RunSpec {
  const { task, logPath, settings } = started.payload;
  const { models, defaultThresholds, fallbackThreshold, criteria, approve, approvalDeadline, ...rest } =
    settings;
  return {
    runId,
    task,
    logPath: options.logPath ?? logPath,
    ...rest,
    criteria: criteria ?? null,
    approve: approve ?? [],
    approvalDeadline: approvalDeadline ?? null,
    defaultThresholds: defaultThresholds ?? options.defaults?.defaultThresholds ?? {},
    fallbackThreshold:
      fallbackThreshold ?? options.defaults?.fallbackThreshold ?? OPTION_DEFAULTS.fallbackThreshold,
    models,
  };
}

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
}

/** How many ended runs a coordinator remembers, to tell a late result of its own from another coordinator's. */
const ENDED_RUNS_REMEMBERED = 10_000;

/** A call waiting for its result. */
interface PendingCall {
  run: RunState;
  /** The run that asked: a result must name it. */
  runId: string;
  /** The role that serves the request (`ROLE_OF_REQUEST`): a result must come from it. */
  role: Role;
  resolve: (result: RoleResult) => void;
}

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

/** What the coordinator knows of a run it owns, to judge a result no call was waiting for. */
interface RunState {
  /** False once the run's closing event is recorded. */
  isOpen(): boolean;
  /** Records an event of the run, unless it has ended. */
  recordIfOpen(draft: RunEventDraft): void;
  /** Requests answered already. */
  answered: Set<string>;
  /** Requests cancelled, with the reason recorded. */
  cancelled: Map<string, string>;
}

/** Creates a coordinator on `bus`; one coordinator runs any number of runs at once. */
export function createCoordinator(options: CoordinatorOptions) {
  const { bus } = options;
  const clock = options.clock ?? Date.now;
  const timestamp = isoTimestamps(clock);
  const pending = new Map<string, PendingCall>();
  const active = new Map<string, RunState>();
  const ended = new LRUCache<string, true>({ max: ENDED_RUNS_REMEMBERED });

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
    if (!call?.run.isOpen() || mismatch(call, result) !== null) return false;
    pending.delete(result.requestId);
    call.run.answered.add(result.requestId);
    call.resolve(result);
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

  // One subscription for the results of every run: request ids are unique across runs.
  const results = subscribeResults(bus, '*', (result) => {
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
  });

  // The charts are provided once per coordinator, not per run (see `provideCharts`); each run's
  // actors reach their run through the actor system they belong to.
  const scopes = new WeakMap<AnyActorSystem, RunScope>();
  const machine = provideCharts((system) => scopes.get(system));

  /**
   * Starts a run. Throws `ConfigurationError` when this coordinator has a run of that id, or had
   * one: a run id is never reused, since every message id of a run derives from it.
   */
  function startRun(spec: RunSpec): RunHandle {
    if (active.has(spec.runId) || ended.get(spec.runId)) throw runIdTaken(spec.runId);
    return drive(spec, null);
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
    return drive(resumedSpec(recorded, options), { recorded, options });
  }

  function drive(spec: RunSpec, resume: { recorded: RecordedRun; options: ResumeOptions } | null): RunHandle {
    const { runId } = spec;
    let seq = 0;
    const calls: ModelCall[] = [];
    const publishing: Promise<void>[] = [];
    let publishFailure: unknown = null;
    let closed = false;
    /** Requests of this run still waiting for their result, with their phase. */
    const asked = new Map<string, Phase>();
    /**
     * The run's time is epoch ms less the time it spent paused: a resumed run does not count the
     * time its process was dead, in its duration or against `maxDurationMs`.
     */
    let pausedMs = 0;
    /** A resumed run's replay, until the recorded events run out. */
    let replay: Replay | null =
      resume &&
      new Replay(resume.recorded, (fact) => {
        seq = fact.seq;
        if (fact.type === 'model.call.completed') {
          const { requestId: _, worker: __, ...call } = fact.payload;
          calls.push(call);
        }
      });
    let rejectDiverged: (error: ResumeError) => void = () => {};
    const divergence = new Promise<never>((_, reject) => {
      rejectDiverged = reject;
    });
    divergence.catch(() => undefined); // observed through `done`
    /** A replay that disagrees with the log ends the run at once: nothing more is recorded. */
    const diverged = (error: unknown): unknown => {
      if (error instanceof ResumeError) {
        closed = true;
        rejectDiverged(error);
      }
      return error;
    };
    /** The coordinator that took the run over from this one, once it has. */
    let takenBy: string | null = null;
    let rejectTaken: (error: RunTakenOverError) => void = () => {};
    const taken = new Promise<never>((_, reject) => {
      rejectTaken = reject;
    });
    taken.catch(() => undefined); // observed through `done`
    /** Aborted when the run is let go: its events and work items not yet stored are not sent. */
    const sending = new AbortController();
    /** Stops driving the run, which `owner` records from here on: `done` rejects with `error`. */
    const letGo = (owner: string, error: RunTakenOverError): void => {
      takenBy ??= owner;
      sending.abort(error);
      if (closed) return;
      closed = true;
      rejectTaken(error);
      actor.stop();
    };
    const publishFailed = (error: unknown): void => {
      if (error instanceof EventSeqTakenError) {
        // Another coordinator recorded an event of this seq: the run's record is theirs to go on
        // with, even past this coordinator's closing event.
        const lost = new RunTakenOverError(error.message, { cause: error });
        publishFailure = lost;
        letGo('another coordinator', lost);
        return;
      }
      // Not sent because the run was let go: its record is another coordinator's.
      if (sending.signal.aborted) return;
      // A run whose events cannot be published has no record: stop it rather than go on unrecorded.
      publishFailure ??= error;
      actor.send({ type: 'interrupt', reason: `its events could not be published: ${String(error)}` });
    };

    const { tracing } = options;
    /** Where the run is traced, what its work items carry: the span a worker's spans go under. */
    const traceHeaders = (): MessageHeaders | undefined => {
      const traceparent = tracing && traceSafely(`run ${runId}`, () => tracing.traceparent(runId));
      return traceparent === undefined ? undefined : { [TRACEPARENT_HEADER]: traceparent };
    };
    const publishRecorded = (event: RunEvent): Promise<void> =>
      Object.hasOwn(ROLE_OF_REQUEST, event.type)
        ? publishRequest(bus, event as RoleRequest, traceHeaders(), sending.signal)
        : publishEvent(bus, event, sending.signal);
    /** Stamps and publishes an event; `at` is its time when the caller read the clock for it. */
    const record = <T extends RunEventDraft>(draft: T, at?: number): RunEventOf<T['type']> => {
      // After the closing event nothing more belongs to the run: a call that was in flight when
      // the run was interrupted answers into the void rather than behind the log's last section.
      if (closed) throw new RunClosedError(`run ${runId} has ended`);
      if (replay !== null) {
        const recorded = replayed(draft);
        if (recorded !== null) return recorded as RunEventOf<T['type']>;
      }
      if (draft.type === 'run.completed' || draft.type === 'run.failed') closed = true;
      seq += 1;
      const id = `${runId}-${seq}-${unguessableId()}`;
      const event = { id, runId, seq, ts: timestamp(at), ...draft } as RunEvent;
      // Observed first: a request's span (its attempt's, say) is open before its work item is sent.
      if (tracing) traceSafely(`run ${runId}`, () => tracing.observe(event));
      publishing.push(publishRecorded(event).catch(publishFailed));
      return event as RunEventOf<T['type']>;
    };
    /** During a replay, the recorded event `draft` produces again; null when they have run out (the run is live now). */
    const replayed = (draft: RunEventDraft): RunEvent | null => {
      try {
        const event = replay!.match(draft);
        if (event !== null) {
          seq = event.seq;
          return event;
        }
        if (resume!.options.replayOnly)
          throw replay!.beyond(`the log has ended, the replay goes on with ${draft.type}`);
        goLive([]);
        return null;
      } catch (error) {
        throw diverged(error);
      }
    };
    /**
     * A replay-only run at a call or a gate its log does not answer (`missing`): if the log says
     * the run was interrupted there, it is interrupted again with the same reason, and the call
     * waits for the stop (its cancellation is in the log already); else the replay parted from it.
     */
    const interruptedAsRecorded = <T>(missing: string, signal: AbortSignal): Promise<T> => {
      const reason = replay!.interruption();
      if (reason === undefined) throw replay!.beyond(missing);
      // Sent once the call's actor has started: the chart takes it like a person's interrupt.
      queueMicrotask(() =>
        actor.send(reason === null ? { type: 'interrupt' } : { type: 'interrupt', reason }),
      );
      return new Promise<T>((_, reject) => {
        signal.addEventListener('abort', () => reject(signal.reason), { once: true });
      });
    };
    /** Ends the replay: the remaining recorded facts are taken, and `run.resumed` is recorded. */
    const goLive = (repeated: string[]): void => {
      const { recorded, options: resumed } = resume!;
      replay!.finish();
      replay = null;
      seq = recorded.events.length;
      const now = clock();
      const paused = Math.max(0, now - recorded.lastAt);
      pausedMs = recorded.pausedMs + paused;
      options.tracing?.resume(runId, recorded.started.payload.traceparent);
      record(
        {
          type: 'run.resumed',
          payload: {
            owner: resumed.owner,
            fromSeq: seq,
            logPath: spec.logPath,
            repeated,
            pausedMs: paused,
            discardedBytes: resumed.discardedBytes ?? 0,
          },
        },
        now,
      );
    };
    const state: RunState = {
      isOpen: () => !closed,
      recordIfOpen: (draft) => {
        if (!closed) record(draft);
      },
      answered: new Set(),
      cancelled: new Map(),
    };

    /** Records that the run stopped waiting for a request, and why. */
    const markCancelled = (requestId: string, phase: Phase, reason: string): void => {
      state.cancelled.set(requestId, reason);
      state.recordIfOpen({ type: 'request.cancelled', payload: { requestId, phase, reason } });
    };

    /**
     * Stops waiting for a request and tells the workers to drop it. The chart records its closing
     * event before XState stops the call actors, so the calls still asked at the close are
     * recorded as cancelled just before it (`recordChart`); here the event is recorded only for a
     * call cancelled while the run goes on.
     */
    const cancel = (requestId: string, stopped: string): void => {
      pending.delete(requestId);
      const phase = asked.get(requestId);
      if (phase === undefined) return;
      asked.delete(requestId);
      // A run taken over is not this coordinator's to cancel: its new owner waits for the result.
      if (takenBy !== null) return;
      const reason = state.cancelled.get(requestId) ?? stopped;
      if (!state.cancelled.has(requestId)) markCancelled(requestId, phase, reason);
      publishCancel(bus, { runId, requestId, reason, ts: timestamp() }).catch(() => {
        // A worker that misses the cancel finishes the call; its result is then rejected as late.
      });
    };

    /**
     * Records the model calls a result reports, stamped with the time it arrived (which a replay
     * reads back as the answer's time), and what they cost on top of `carried`.
     */
    const spent = (request: RoleRequest, result: RoleResult, carried: Usage, now: number): CallReport => {
      let usage = carried;
      for (const call of result.calls) {
        usage = addUsage(usage, {
          promptTokens: call.promptTokens,
          completionTokens: call.completionTokens,
          costUsd: call.costUsd,
          calls: 1,
        });
        calls.push(call);
        record(
          {
            type: 'model.call.completed',
            payload: { requestId: request.id, worker: result.worker, ...call },
          },
          now,
        );
      }
      return { usage, finishedAt: now - pausedMs };
    };

    /** The gate the run waits at, and how to settle it. */
    let waiting: {
      gate: ApprovalGate;
      requestId: string;
      settle: (decision: ApprovalDecision) => void;
    } | null = null;

    /**
     * Records `approval.requested` and waits for a person's decision, recorded as
     * `approval.decided`. A replay takes the recorded decision; one the log does not hold (the run
     * was waiting when its process died) is waited for again.
     */
    function awaitDecision(input: ApprovalInput, signal: AbortSignal): Promise<ApprovalOutput> {
      signal.throwIfAborted();
      const request = record({ type: 'approval.requested', payload: input });
      const decided = (decision: ApprovalDecision): ApprovalDecision => {
        record({
          type: 'approval.decided',
          payload: { requestId: request.id, gate: input.gate, ...decision },
        });
        return decision;
      };
      if (replay !== null) {
        const { recorded, options } = resume!;
        const decision = recorded.decisions.get(request.id);
        if (decision !== undefined) return Promise.resolve(decided(decision));
        try {
          if (options.replayOnly)
            return interruptedAsRecorded(`approval ${request.id} has no recorded decision`, signal);
          goLive([]);
        } catch (error) {
          throw diverged(error);
        }
      }
      return new Promise<ApprovalOutput>((resolve, reject) => {
        // A wall-clock deadline from the request: a restart of the process that waited does not reset it.
        const deadline = spec.approvalDeadline;
        const timer =
          deadline === null
            ? undefined
            : setTimeout(
                () => {
                  const why = `no decision within ${deadline.timeoutMs} ms`;
                  if (deadline.policy === 'stop')
                    actor.send({ type: 'interrupt', reason: `the ${input.gate} gate had ${why}` });
                  else waiting?.settle({ decision: deadline.policy, reason: why, by: 'deadline' });
                },
                Math.max(0, Date.parse(request.ts) + deadline.timeoutMs - clock()),
              );
        const onAbort = () => {
          clearTimeout(timer);
          waiting = null;
          reject(signal.reason);
        };
        signal.addEventListener('abort', onAbort, { once: true });
        waiting = {
          gate: input.gate,
          requestId: request.id,
          settle: (decision) => {
            clearTimeout(timer);
            signal.removeEventListener('abort', onAbort);
            waiting = null;
            resolve(decided(decision));
          },
        };
      });
    }

    /**
     * Sends a request and waits for its result; records the calls it cost. A request with no
     * result within the run's `callTimeoutMs` is cancelled and answered with a failure, as if its
     * worker had given up: the chart then goes on as it does after any failed call.
     */
    function ask(draft: RequestDraft, signal: AbortSignal): Promise<RoleReply> {
      signal.throwIfAborted();
      const request = record(draft as RunEventDraft) as RoleRequest;
      // Still replaying: the request is a recorded one.
      let carried = ZERO_USAGE;
      let stored: ResumeOptions['storedResult'];
      if (replay !== null) {
        const { recorded, options } = resume!;
        const answer = recorded.answers.get(request.id);
        if (answer !== undefined) {
          state.answered.add(request.id);
          const report = { usage: answer.usage, finishedAt: answer.finishedAt };
          return Promise.resolve({ request, result: answer.result, report, receivedAt: answer.receivedAt });
        }
        // In flight at the crash: its answer was lost, so it is asked again; the calls it had
        // cost are recorded, and count.
        carried = recorded.usage.get(request.id) ?? ZERO_USAGE;
        try {
          if (options.replayOnly)
            return interruptedAsRecorded(`${request.type} ${request.id} has no recorded answer`, signal);
          goLive([request.id]);
        } catch (error) {
          throw diverged(error);
        }
        if (options.resend !== false)
          publishing.push(enqueueWork(bus, request, traceHeaders(), sending.signal).catch(publishFailed));
        stored = options.storedResult;
      }
      // `record` published the request both as an event and on the role's work queue.
      const { phase } = request.payload;
      asked.set(request.id, phase);
      return new Promise<RoleReply>((resolve, reject) => {
        const settled = () => {
          signal.removeEventListener('abort', onAbort);
          clearTimeout(deadline);
          asked.delete(request.id);
        };
        const onAbort = () => {
          clearTimeout(deadline);
          cancel(request.id, abortReason(signal));
          reject(signal.reason);
        };
        const deadline = setTimeout(() => {
          const timeout = new CallTimeoutError(
            `no answer to ${request.type} ${request.id} within ${spec.callTimeoutMs} ms`,
          );
          cancel(request.id, timeout.message);
          settled();
          const now = clock();
          resolve({
            request,
            result: { status: 'error', phase, error: describeError(timeout), raw: null },
            report: { usage: carried, finishedAt: now - pausedMs },
            receivedAt: now,
          });
        }, spec.callTimeoutMs);
        signal.addEventListener('abort', onAbort, { once: true });
        pending.set(request.id, {
          run: state,
          runId,
          role: ROLE_OF_REQUEST[request.type],
          // Taken in the same tick as the result arrives: an interrupt handled right after it
          // finds the call answered and its cost recorded, not a request still asked.
          resolve: (result) => {
            settled();
            const now = clock();
            resolve({
              request,
              result: result.result,
              report: spent(request, result, carried, now),
              receivedAt: now,
            });
          },
        });
        // Asked again after a crash: a worker may have answered after the last owner died.
        if (stored !== undefined) {
          stored(request.id).then(
            (result) => result !== null && (applyResult(result) || rejectMismatch(result)),
            () => {
              // Not found is the usual case; the request was queued again and will be answered.
            },
          );
        }
      });
    }

    /** Records a chart's event; before a closing one, the calls still asked are recorded as cancelled. */
    const recordChart = (draft: RecordParams): void => {
      if (draft.type === 'run.completed' || draft.type === 'run.failed') {
        const reason = draft.type === 'run.failed' ? draft.payload.message : 'the run ended';
        for (const [requestId, phase] of asked) markCancelled(requestId, phase, reason);
      }
      record(completeDraft(draft, calls));
    };

    const {
      runId: _runId,
      models,
      callTimeoutMs: _callTimeoutMs,
      approvalDeadline,
      acting,
      ...settings
    } = spec;
    let startedAt: number;
    if (resume === null) {
      startedAt = clock();
      record(
        {
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
              defaultThresholds: settings.defaultThresholds,
              fallbackThreshold: settings.fallbackThreshold,
              ...(settings.criteria === null ? {} : { criteria: settings.criteria }),
              ...(settings.approve.length === 0 ? {} : { approve: settings.approve }),
              budgets: settings.budgets,
              callTimeoutMs: spec.callTimeoutMs,
              ...(approvalDeadline === null ? {} : { approvalDeadline }),
              models,
              ...(acting === undefined ? {} : { acting }),
            },
            ...(options.tracing ? { traceparent: options.tracing.begin(runId) } : {}),
          },
        },
        // The run's start is its first event's time, so that a replay reads it back exactly.
        startedAt,
      );
    } else {
      startedAt = Date.parse(resume.recorded.started.ts);
      seq = 1;
    }
    const actor = createActor(machine, {
      input: { ...settings, startedAt },
      ...(options.inspect ? { inspect: options.inspect } : {}),
    });
    scopes.set(actor.system, { record, recordChart, ask, awaitDecision });
    active.set(runId, state);
    // Observed before the start: a replay that disagrees may end the chart in the first ticks.
    const finished = toPromise(actor);
    actor.start();

    const done = (async () => {
      try {
        const outcome = await Promise.race([finished, divergence, taken]);
        await Promise.all(publishing);
        if (publishFailure) throw publishFailure;
        return outcome;
      } finally {
        actor.stop();
        scopes.delete(actor.system);
        active.delete(runId);
        // Results of a run taken over are its new owner's to judge.
        if (takenBy === null) ended.set(runId, true);
      }
    })();

    return {
      runId,
      done,
      calls,
      interrupt: (reason?: string) =>
        actor.send(reason ? { type: 'interrupt', reason } : { type: 'interrupt' }),
      decide: (gate, decision, requestId) => {
        if (waiting === null || waiting.gate !== gate || closed) return false;
        if (requestId !== undefined && requestId !== waiting.requestId) return false;
        waiting.settle(decision);
        return true;
      },
      waitingAt: () => (waiting === null ? null : { gate: waiting.gate, requestId: waiting.requestId }),
      abandon: (owner: string) => {
        if (!closed) letGo(owner, new RunTakenOverError(`run ${runId} was taken over by ${owner}`));
      },
    };
  }

  return {
    startRun,
    resumeRun,
    /** Stops taking results; runs still going will not finish. */
    close(): void {
      results.unsubscribe();
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

/** Why a call's actor was stopped, in words for its cancel. */
function abortReason(signal: AbortSignal): string {
  const reason: unknown = signal.reason;
  if (reason instanceof Error && reason.name !== 'AbortError') return reason.message;
  return 'the state that made the call was left';
}

/** A coordinator as `createCoordinator` returns it. */
export type Coordinator = ReturnType<typeof createCoordinator>;
