import { type Bus, type MessageHeaders, TRACEPARENT_HEADER } from '../bus/bus.js';
import { enqueueWork, publishEvent, publishRequest } from '../bus/channels.js';
import { EventSeqTakenError, ResumeError, RunClosedError, RunTakenOverError } from '../errors.js';
import type { SessionEvent } from '../machines/session-machine.js';
import type { ModelCall, RoleRequest, RunEvent, RunEventDraft, RunEventOf } from '../schemas/index.js';
import { isRoleRequest } from '../schemas/index.js';
import type { RunTracing } from '../telemetry/run-tracing.js';
import { traceSafely } from '../telemetry/trace-safely.js';
import { unguessableId } from '../unguessable-id.js';
import { type RecordedRun, Replay } from './replay.js';
import type { ResumeOptions, RunSpec } from './run-spec.js';

/**
 * The writer of one run's events: stamps each with `seq`, id and time and publishes it (a request
 * also on its role's work queue), and while a resumed run replays, hands out the recorded events
 * its charts produce again instead. Its I/O and its counters only; what the run's session is in
 * (replaying, live, taken over, diverged) is the session chart's, which it tells through `notify`.
 */

/** The key of a gate among the calls and gates waiting for the log's end: not a call asked again. */
export const GATE = 'gate:';

/** What a recorder needs of its coordinator. */
export interface RecorderDeps {
  bus: Bus;
  clock: () => number;
  /** ISO timestamps of the clock, `ms` when given. */
  timestamp: (ms?: number) => string;
  tracing?: RunTracing | undefined;
}

/** A resumed run: its recorded events and how it is resumed. */
export interface Resumption {
  recorded: RecordedRun;
  options: ResumeOptions;
}

/** The stamping, publishing and replay cursor of one run. */
export class RunRecorder {
  seq = 0;
  /** True once nothing more may be recorded: the closing event is, or the run was let go or diverged. */
  closed = false;
  /** Every model call of the run so far, repairs included. */
  readonly calls: ModelCall[] = [];
  /** The publishes under way; the run is done once they all are. */
  readonly publishing: Promise<void>[] = [];
  /** The failure that left the run without its record, once one did. */
  publishFailure: unknown = null;
  /** The coordinator that took the run over from this one, once it has. */
  takenBy: string | null = null;
  /**
   * The run's time is epoch ms less the time it spent paused: a resumed run does not count the
   * time its process was dead, in its duration or against `maxDurationMs`.
   */
  pausedMs = 0;
  /** Aborted when the run is let go: its events and work items not yet stored are not sent. */
  readonly sending = new AbortController();
  /** A resumed run's replay, until the recorded events run out. */
  replay: Replay | null;
  /** Tells the run's session what happened (`replay.ended`, `diverged`, `abandon`, `publish.failed`). */
  notify: (event: SessionEvent) => void = () => {};
  /**
   * Recorded answers and decisions waiting for their turn, by the seq of their event: steps that
   * ran side by side had theirs in the order the log holds, and a replay hands each out when it
   * reaches it, so that the charts produce their events again in that order.
   */
  readonly #turns = new Map<number, () => void>();
  /**
   * Calls and gates the log does not answer (in flight when the run's process died), each waiting
   * for the replay to reach the log's end: there the run goes live (or a replay-only run is
   * interrupted), and each is asked again. By request id.
   */
  readonly #atEnd = new Map<
    string,
    { release: (stopped: boolean) => void; fail: (error: unknown) => void }
  >();

  constructor(
    private readonly deps: RecorderDeps,
    readonly spec: RunSpec,
    readonly resume: Resumption | null,
  ) {
    this.replay =
      resume &&
      new Replay(resume.recorded, (fact) => {
        this.seq = fact.seq;
        if (fact.type === 'model.call.completed') {
          const { requestId: _, worker: __, ...call } = fact.payload;
          this.calls.push(call);
        }
      });
  }

  /** Stamps and publishes an event; `at` is its time when the caller read the clock for it. */
  record<T extends RunEventDraft>(draft: T, at?: number): RunEventOf<T['type']> {
    const { runId } = this.spec;
    // After the closing event nothing more belongs to the run: a call that was in flight when
    // the run was interrupted answers into the void rather than behind the log's last section.
    if (this.closed) throw new RunClosedError(`run ${runId} has ended`);
    if (this.replay !== null) {
      const recorded = this.replayed(draft);
      if (recorded !== null) return recorded as RunEventOf<T['type']>;
    }
    if (draft.type === 'run.completed' || draft.type === 'run.failed') this.closed = true;
    this.seq += 1;
    const id = `${runId}-${this.seq}-${unguessableId()}`;
    const event = { id, runId, seq: this.seq, ts: this.deps.timestamp(at), ...draft } as RunEvent;
    const { tracing } = this.deps;
    // Observed first: a request's span (its attempt's, say) is open before its work item is sent.
    if (tracing) traceSafely(`run ${runId}`, () => tracing.observe(event));
    this.publishing.push(this.#publish(event).catch(this.publishFailed));
    return event as RunEventOf<T['type']>;
  }

  #publish(event: RunEvent): Promise<void> {
    const { bus } = this.deps;
    return isRoleRequest(event)
      ? publishRequest(bus, event, this.traceHeaders(), this.sending.signal)
      : publishEvent(bus, event, this.sending.signal);
  }

  /**
   * Queues a recorded request again: asked again after a crash, or its work item lost (then with a
   * `messageId` of its own, so that the stream stores it although it stored the first). Resolves
   * with whether the queue stored it (a failure is the run's, as for any publish).
   */
  enqueueAgain(request: RoleRequest, messageId?: string): Promise<boolean> {
    const { bus } = this.deps;
    const work = enqueueWork(bus, request, this.traceHeaders(), this.sending.signal, messageId);
    const stored = work.then(
      () => true,
      (error: unknown) => {
        this.publishFailed(error);
        return false;
      },
    );
    this.publishing.push(stored.then(() => undefined));
    return stored;
  }

  /** During a replay, the recorded event `draft` produces again; null when they have run out (the run is live now). */
  private replayed(draft: RunEventDraft): RunEvent | null {
    try {
      const event = this.replay!.match(draft);
      if (event !== null) {
        this.seq = event.seq;
        this.#handOut();
        // Past the last event the charts produce, the calls in flight at the crash may all be
        // waiting already: looked at once the caller that recorded this has gone on.
        if (this.replay!.atEnd || this.replay!.interruption() !== undefined)
          queueMicrotask(() => this.#reachEnd());
        return event;
      }
      if (this.resume!.options.replayOnly)
        throw this.replay!.beyond(`the log has ended, the replay goes on with ${draft.type}`);
      this.goLive();
      return null;
    } catch (error) {
      throw this.diverged(error);
    }
  }

  /**
   * While replaying, resolves once the replay reaches the recorded event of seq `seq` (where the
   * answer or decision a call or gate takes from the log came): everything the charts recorded
   * before it has been produced again first. Answers that came together are handed out together,
   * in the log's order, as they came.
   */
  inTurn(seq: number): Promise<void> {
    return new Promise((resolve) => {
      this.#turns.set(seq, resolve);
      this.#handOut();
    });
  }

  /**
   * While replaying, for a call or gate the log does not answer (`missing`, its request
   * `requestId`): resolves once the replay has reached the log's end. A live resume then goes live
   * (false: ask again). A replay-only run whose log says it was interrupted there is interrupted
   * again with the same reason (true: the call waits for the stop, its cancellation in the log
   * already); any other end of a replay-only run parts from its log (rejects).
   */
  atLogEnd(requestId: string, missing: string, signal: AbortSignal): Promise<boolean> {
    return new Promise((release, fail) => {
      // Stopped while it waits (the run was interrupted): it is not asked again.
      const onAbort = () => {
        this.#atEnd.delete(requestId);
        fail(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      const settle = () => signal.removeEventListener('abort', onAbort);
      this.#atEnd.set(requestId, {
        release: (stopped) => {
          settle();
          release(stopped);
        },
        fail: (error) => {
          settle();
          fail(this.diverged(error));
        },
      });
      this.#missing = missing;
      this.#reachEnd();
    });
  }

  /** What the latest call or gate waiting for the log's end misses, for a replay-only run's divergence. */
  #missing = '';

  /** Hands out the recorded answers whose turn it is. */
  #handOut(): void {
    for (const event of this.replay?.ahead() ?? []) {
      const turn = this.#turns.get(event.seq);
      if (turn === undefined) continue;
      this.#turns.delete(event.seq);
      turn();
    }
  }

  /**
   * At the end of what the charts produce again (only facts are left, or only an interrupted
   * run's closing event, which the interrupt produces), the calls and gates the log does not
   * answer go on: the run goes live, or a replay-only run is interrupted or parts from its log.
   * Looked at as each of them begins to wait, and once the last recorded event is produced.
   */
  #reachEnd(): void {
    const replay = this.replay;
    // Nothing waits: the charts go on past the log (`replayed`), or end where it does.
    if (replay === null || this.#atEnd.size === 0) return;
    if (!replay.atEnd && replay.interruption() === undefined) return;
    if (!this.resume!.options.replayOnly) {
      this.goLive();
      return;
    }
    const waiting = [...this.#atEnd.values()];
    this.#atEnd.clear();
    const stop = replay.interruption();
    if (stop === undefined) {
      const error = replay.beyond(this.#missing);
      for (const w of waiting) w.fail(error);
      return;
    }
    // Sent once the calls' actors have gone on waiting: the chart takes it like a person's interrupt.
    for (const w of waiting) w.release(true);
    queueMicrotask(() => this.notify(stop));
  }

  /**
   * Ends the replay: the remaining recorded facts are taken, `run.resumed` is recorded (naming the
   * calls asked again), and the calls and gates the log did not answer go on live.
   */
  goLive(): void {
    const waiting = [...this.#atEnd.entries()];
    this.#atEnd.clear();
    const repeated = waiting.map(([requestId]) => requestId).filter((id) => !id.startsWith(GATE));
    const { recorded, options } = this.resume!;
    this.replay!.finish();
    this.replay = null;
    this.seq = recorded.events.length;
    const now = this.deps.clock();
    const paused = Math.max(0, now - recorded.lastAt);
    this.pausedMs = recorded.pausedMs + paused;
    this.deps.tracing?.resume(this.spec.runId, recorded.started.payload.traceparent);
    const payload = {
      owner: options.owner,
      fromSeq: this.seq,
      logPath: this.spec.logPath,
      repeated,
      pausedMs: paused,
      discardedBytes: options.discardedBytes ?? 0,
    };
    this.record({ type: 'run.resumed', payload }, now);
    this.notify({ type: 'replay.ended' });
    for (const [, w] of waiting) w.release(false);
  }

  /** A replay that disagrees with the log ends the run at once: nothing more is recorded. */
  diverged(error: unknown): unknown {
    if (error instanceof ResumeError) {
      this.closed = true;
      this.notify({ type: 'diverged', error });
    }
    return error;
  }

  /** Stops recording and sending the run, which `owner` records from here on. Idempotent. */
  letGo(owner: string, error: Error): void {
    this.takenBy ??= owner;
    this.sending.abort(error);
    this.closed = true;
  }

  /** A publish failed: the run is stopped, or let go when another coordinator recorded that seq. */
  readonly publishFailed = (error: unknown): void => {
    if (error instanceof EventSeqTakenError) {
      // Another coordinator recorded an event of this seq: the run's record is theirs to go on
      // with, even past this coordinator's closing event.
      const lost = new RunTakenOverError(error.message, { cause: error });
      this.publishFailure = lost;
      const open = !this.closed;
      this.letGo('another coordinator', lost);
      if (open) this.notify({ type: 'abandon', owner: 'another coordinator', error: lost });
      return;
    }
    // Not sent because the run was let go: its record is another coordinator's.
    if (this.sending.signal.aborted) return;
    // A run whose events cannot be published has no record: stop it rather than go on unrecorded.
    this.publishFailure ??= error;
    this.notify({ type: 'publish.failed', error });
  };

  /** Where the run is traced, what its work items carry: the span a worker's spans go under. */
  traceHeaders(): MessageHeaders | undefined {
    const { tracing } = this.deps;
    const { runId } = this.spec;
    const traceparent = tracing && traceSafely(`run ${runId}`, () => tracing.traceparent(runId));
    return traceparent === undefined ? undefined : { [TRACEPARENT_HEADER]: traceparent };
  }
}
