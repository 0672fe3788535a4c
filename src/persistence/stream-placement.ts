import { LRUCache } from 'lru-cache';
import { LogWriteError } from '../errors.js';
import type { RunEvent, RunEventOf } from '../schemas/index.js';
import type { LogWriter } from './index.js';
import type { RunLog, RunLogs } from './run-logs.js';
import type { RunQueues } from './run-queues.js';

/**
 * How the persistence actor places an event when the transport keeps every run's events (NATS:
 * PGE_EVENTS): the stream, not the delivery, is the record. A run first seen midway is read from
 * its start; a seq gap is filled from the stream; an event no log can take is reported and let go.
 * Nothing waits on a message that cannot be placed, so one bad message never holds the consumer.
 */

/** What `createStreamPlacement` needs. */
export interface StreamPlacementOptions {
  logs: RunLogs;
  /** Every event the stream keeps of a run, in stored order. */
  read: (runId: string) => Promise<readonly RunEvent[]>;
  /**
   * The first event the stream keeps of a run (one lookup), to open the log of a run joined midway
   * without reading all of it; absent, `read` is used.
   */
  opening?: (runId: string) => Promise<RunEvent | null>;
  /** How long a gap the stream cannot fill may last before the run's log fails. */
  gapWaitMs: number;
  /** Runs a run's placements and gap checks one at a time. */
  queues: RunQueues;
  reject: (event: RunEvent, problem: string) => void;
}

/** Runs found to have no `run.started`, remembered so that one that turns up later reads its start. */
const ORPHANS_KEPT = 10_000;

/**
 * Where a placed event stands: `written` resolves once it is on disk, or known to be in no log
 * (reported), or held behind a gap that is given `gapWaitMs` to fill. Wrapped, so that a placement
 * run in its run's queue ends once the event is placed, not once it is written: the next one is placed
 * while this one's write is under way, and a backlog goes to disk in a few large writes.
 */
export interface Placed {
  readonly written: Promise<void>;
}

const PLACED_NOWHERE: Placed = { written: Promise.resolve() };

/** The placement of a transport's events in their runs' logs, with the runs it found no start of. */
class StreamPlacement {
  private readonly orphans = new LRUCache<string, true>({ max: ORPHANS_KEPT });

  constructor(private readonly options: StreamPlacementOptions) {}

  /** Places one delivered event (`createStreamPlacement`). */
  async place(event: RunEvent): Promise<Placed> {
    const { logs } = this.options;
    if (logs.settledAsClosed(event)) return PLACED_NOWHERE;
    let run = logs.get(event.runId);
    if (run?.failure) return PLACED_NOWHERE; // reported already, and the run is being stopped
    if (run?.writer) logs.accept(run, run.writer, event);
    else run = await this.join(event);
    const writer = run?.writer;
    if (run === undefined || writer == null) return PLACED_NOWHERE;
    await writer.ready.catch(() => undefined); // a failure to open is reported through onError
    // A log the previous worker finished already ends with the closing event.
    if (writer.endSeq !== null && run.done === null) logs.closeAt(event.runId, run, writer, writer.endSeq);
    if (writer.missingSeq !== null) await this.fill(run, writer);
    if (run.failure !== null) return PLACED_NOWHERE;
    if (writer.missingSeq !== null) {
      this.awaitGap(run, writer);
      return PLACED_NOWHERE;
    }
    // A failed write has reached onError, which stops the run: the message has nothing left to wait for.
    return { written: (run.done ?? writer.flushed()).catch(() => undefined) };
  }

  /**
   * What the stream holds of a run first seen midway that its log needs before `event`: with
   * `opening`, its `run.started` alone when that is the run's first stored event (what the log
   * lacks after it is read as a gap, `fill`: a restarted worker's logs hold most of it), else all.
   */
  private async joining(event: RunEvent): Promise<readonly RunEvent[]> {
    const { opening, read } = this.options;
    // A run.started seen first needs no history, unless earlier events of its run were refused.
    if (event.type === 'run.started' && this.orphans.get(event.runId) === undefined) return [];
    const first = opening === undefined ? null : await opening(event.runId);
    return first?.type === 'run.started' ? [first] : read(event.runId);
  }

  /** Opens the log of a run first seen midway (or of no run at all): its start is in the stream. */
  private async join(event: RunEvent): Promise<RunLog | undefined> {
    const { logs, reject } = this.options;
    const { runId } = event;
    const stored = await this.joining(event);
    const started =
      event.type === 'run.started'
        ? event
        : stored.find((e): e is RunEventOf<'run.started'> => e.type === 'run.started');
    if (started === undefined) {
      this.orphans.set(runId, true);
      reject(event, 'cannot be placed: the run has no run.started (no run of that id was started)');
      return undefined;
    }
    this.orphans.delete(runId);
    const run = logs.open(runId);
    const writer = logs.start(run, started);
    if (writer === null) return run;
    for (const earlier of stored) logs.accept(run, writer, earlier, true);
    logs.accept(run, writer, event);
    return run;
  }

  /** Appends what the stream holds of the run: the events a gap waits for, if they were stored. */
  private async fill(run: RunLog, writer: LogWriter): Promise<void> {
    let stored: readonly RunEvent[];
    try {
      stored = await this.options.read(writer.runId);
    } catch {
      return; // the gap stays, and is looked at again when its time is up
    }
    for (const event of stored) this.options.logs.accept(run, writer, event, true);
    await writer.ready.catch(() => undefined);
  }

  /** Gives a gap `gapWaitMs` to fill (events published late, delivered later); then the log fails. */
  private awaitGap(run: RunLog, writer: LogWriter): void {
    if (run.gapTimer !== null) return;
    const { logs, queues, gapWaitMs } = this.options;
    const { runId } = writer;
    const missing = writer.missingSeq;
    run.gapTimer = setTimeout(() => {
      run.gapTimer = null;
      const check = queues.run(runId, () => this.checkGap(run, writer, missing));
      // Only reading the stream can fail in there, and fill() catches that: this is a bug if it fires.
      check.catch((error: unknown) =>
        logs.report(
          runId,
          run,
          new LogWriteError(`cannot check the gap at seq ${missing}: ${String(error)}`),
        ),
      );
    }, gapWaitMs);
  }

  /**
   * A gap's time is up: filled from the stream if it can be now, waited for again if it moved on,
   * else the events held behind it are reported and the run's log fails.
   */
  private async checkGap(run: RunLog, writer: LogWriter, missing: number | null): Promise<void> {
    const { logs, gapWaitMs, reject } = this.options;
    if (run.failure !== null || writer.missingSeq === null) return;
    await this.fill(run, writer);
    if (run.failure !== null || writer.missingSeq === null) return;
    if (writer.missingSeq !== missing) return this.awaitGap(run, writer);
    const waiting = writer.waiting();
    const problem = `cannot be placed: seq ${missing} never reached the stream within ${gapWaitMs} ms`;
    for (const event of waiting) reject(event, problem);
    const message = `seq ${missing} of run ${writer.runId} never reached the stream within ${gapWaitMs} ms; ${waiting.length} later events are in no log`;
    logs.report(writer.runId, run, new LogWriteError(message));
    // Closing fails for the events it holds; that failure is the one just reported.
    writer.close().catch(() => undefined);
  }
}

/**
 * The placement of one delivered event: resolves once the event is placed in its log (`Placed`),
 * or known to be in no log (reported), or held behind a gap. Rejects only when the stream cannot
 * be read to join a run (the delivery is then retried).
 */
export function createStreamPlacement(options: StreamPlacementOptions): (event: RunEvent) => Promise<Placed> {
  const placement = new StreamPlacement(options);
  return (event) => placement.place(event);
}
