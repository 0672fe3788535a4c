import { LRUCache } from 'lru-cache';
import { LogWriteError } from '../errors.js';
import { isClosingEvent, type RunEvent, type RunOpening } from '../schemas/index.js';
import { LogWriter } from './index.js';

/**
 * The open logs of the persistence actor, one per run, and what is remembered of closed ones: the
 * bookkeeping that both ways of receiving events share (in process, and from a stream).
 */

/** One run's log while it is open. */
export interface RunLog {
  writer: LogWriter | null;
  /** Events that came before the run's `run.started` (or `run.resumed`), which names the file (in-process only). */
  early: RunEvent[];
  /** `flushed()` calls that wait for the writer to exist. */
  starting: { resolve: () => void; reject: (error: LogWriteError) => void }[];
  /** Set once the closing event is taken: settles when the log holds it and is closed. */
  done: Promise<void> | null;
  /** The seq of the run's closing event, once the writer took one; else 0. */
  terminalSeq: number;
  failure: LogWriteError | null;
  /** Set while a seq gap that the stream could not fill is given time to fill. */
  gapTimer: NodeJS.Timeout | null;
}

/** What `RunLogs` needs from its actor. */
export interface RunLogsOptions {
  resolvePath?: ((event: RunOpening) => string) | undefined;
  onError: (runId: string, error: LogWriteError) => void;
  /** Reports an event that no log takes on `pge.errors.rejected.<reporter>`. */
  reject: (event: RunEvent, problem: string) => void;
}

/**
 * Closed runs remembered by their closing seq, to tell a redelivered event (ignored) from one that
 * came after the run's end (reported). A closed run's writer and state are dropped at once; only
 * this much is kept, and only for the most recent closed runs, so a long-lived process does not
 * grow with every run it has logged.
 */
const CLOSED_RUNS_KEPT = 10_000;

/** The logs of every run the actor writes. */
export class RunLogs {
  readonly #options: RunLogsOptions;
  readonly #runs = new Map<string, RunLog>();
  readonly #closed = new LRUCache<string, number>({ max: CLOSED_RUNS_KEPT });

  constructor(options: RunLogsOptions) {
    this.#options = options;
  }

  /** The open log of a run, if any. */
  get(runId: string): RunLog | undefined {
    return this.#runs.get(runId);
  }

  /** The open log of a run, created (without a writer) if there is none. */
  open(runId: string): RunLog {
    let run = this.#runs.get(runId);
    if (run === undefined) {
      run = {
        writer: null,
        early: [],
        starting: [],
        done: null,
        terminalSeq: 0,
        failure: null,
        gapTimer: null,
      };
      this.#runs.set(runId, run);
    }
    return run;
  }

  /**
   * True when the run's log is closed already: a redelivery is ignored, and an event after the
   * closing one is reported.
   */
  settledAsClosed(event: RunEvent): boolean {
    const closedAt = this.#closed.get(event.runId);
    if (closedAt === undefined) return false;
    if (event.seq > closedAt) this.#options.reject(event, `came after its closing event (seq ${closedAt})`);
    return true;
  }

  /** Records the run's log failure, once, and tells `onError`. */
  report(runId: string, run: RunLog, error: LogWriteError): void {
    if (run.failure !== null) return;
    run.failure = error;
    this.#options.onError(runId, error);
  }

  /** Opens the run's log and appends what waited for it, or reports why it cannot be chosen. */
  start(run: RunLog, event: RunOpening): LogWriter | null {
    let path: string;
    try {
      path = this.#options.resolvePath?.(event) ?? event.payload.logPath;
    } catch (error) {
      const message = `cannot choose the log of run ${event.runId}: ${String(error)}`;
      this.report(event.runId, run, new LogWriteError(message, { cause: error }));
      return null;
    }
    const writer = new LogWriter({
      path,
      runId: event.runId,
      // A resumed run's log must end right before the resume, as it did when the resume read it.
      ...(event.type === 'run.resumed' ? { continuesAt: event.seq } : {}),
      onError: (error) => this.report(event.runId, run, error),
    });
    run.writer = writer;
    for (const early of run.early) this.accept(run, writer, early);
    run.early = [];
    for (const waiter of run.starting) waiter.resolve();
    run.starting = [];
    return writer;
  }

  /**
   * Appends one event to an open log. An event after the run's closing event is reported on
   * `pge.errors.rejected.<reporter>` (`quiet`: left to the event's own delivery to report). The writer decides
   * which event closes the run (the first one it takes for its seq), and the log closes with it.
   */
  accept(run: RunLog, writer: LogWriter, event: RunEvent, quiet = false): void {
    if (run.failure !== null) return;
    if (run.terminalSeq > 0 && (event.seq > run.terminalSeq || isClosingEvent(event))) {
      if (!quiet && event.seq !== run.terminalSeq)
        this.#options.reject(event, `came after its closing event (seq ${run.terminalSeq})`);
      return;
    }
    // What the writer holds above a closing event it takes is dropped: those events are in no log.
    const held = isClosingEvent(event) ? writer.waiting() : [];
    try {
      writer.append(event);
    } catch (error) {
      const failure =
        error instanceof LogWriteError ? error : new LogWriteError(String(error), { cause: error });
      this.report(event.runId, run, failure);
      return;
    }
    const end = writer.endSeq;
    if (end === null) return;
    for (const dropped of held)
      if (dropped.seq > end) this.#options.reject(dropped, `came after its closing event (seq ${end})`);
    this.closeAt(event.runId, run, writer, end);
  }

  /**
   * Records the run's closing seq and closes its log once everything up to it is written: over
   * NATS an earlier event may still be on its way.
   */
  closeAt(runId: string, run: RunLog, writer: LogWriter, end: number): void {
    run.terminalSeq = end;
    if (run.done !== null) return;
    run.done = writer.finish().then(() => {
      if (run.gapTimer !== null) clearTimeout(run.gapTimer);
      this.#runs.delete(runId);
      this.#closed.set(runId, end);
    });
    // The writer has already told onError of any failure; flushed() callers get the rejection.
    run.done.catch(() => undefined);
  }

  /** See `PersistenceActor.flushed`. */
  flushed(runId: string): Promise<void> {
    const run = this.#runs.get(runId);
    if (run === undefined) return Promise.resolve();
    if (run.failure !== null) return Promise.reject(run.failure);
    if (run.done !== null) return run.done;
    if (run.writer !== null) return run.writer.flushed();
    return new Promise<void>((resolve, reject) => run.starting.push({ resolve, reject })).then(() =>
      this.flushed(runId),
    );
  }

  /** Closes every open log once its queued writes are done; failures go to `onError`. */
  async close(): Promise<void> {
    const closing: Promise<void>[] = [];
    for (const [runId, run] of this.#runs) {
      if (run.gapTimer !== null) clearTimeout(run.gapTimer);
      if (run.writer !== null) closing.push(run.done ?? run.writer.close());
      else if (run.early.length > 0 || run.starting.length > 0) {
        const error = new LogWriteError(
          `${run.early.length} events of run ${runId} arrived without its run.started; they are in no log`,
        );
        this.report(runId, run, error);
        for (const waiter of run.starting) waiter.reject(error);
        run.starting = [];
        run.early = [];
      }
    }
    // Each failure has reached onError already; waiting for all keeps one bad log from leaving others open.
    await Promise.allSettled(closing);
  }
}
