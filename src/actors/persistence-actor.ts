import { BoundedMap } from '../bounded-map.js';
import type { Bus, BusSubscription } from '../bus/bus.js';
import { subscribeEvents } from '../bus/channels.js';
import { LogWriteError } from '../errors.js';
import { LogWriter } from '../persistence/index.js';
import type { RunEvent, RunEventOf } from '../schemas/index.js';

/** Options of `createPersistenceActor`. */
export interface PersistenceActorOptions {
  bus: Bus;
  /**
   * Where a run's log goes; default: the `logPath` of its `run.started` event, or of the
   * `run.resumed` event of a run resumed in another process (whose log already holds its start).
   */
  resolvePath?: (event: RunOpening) => string;
  /**
   * How to receive every run's events; default a plain subscription to `pge.run.*.evt.>`. The NATS
   * deployment passes a durable consumer, so a restarted persistence process misses nothing.
   */
  subscribe?: (handler: (event: RunEvent) => void | Promise<void>) => BusSubscription;
  /**
   * Settle each delivery only once its event is on disk (default false). A durable consumer acks
   * a message when its handler settles, so with this on a crash between receipt and write leaves
   * the event in the stream for the restarted process; the in-process bus has no acks to hold.
   */
  acknowledgeAfterWrite?: boolean;
  /** Told of every failure to write a run's log; that run must stop, since the log is not best-effort. */
  onError: (runId: string, error: LogWriteError) => void;
}

/** The event that opens a run's log: its start, or its resume by a process that did not start it. */
type RunOpening = RunEventOf<'run.started'> | RunEventOf<'run.resumed'>;

/** The persistence actor: every event of every run, appended to that run's markdown log. */
export interface PersistenceActor {
  /**
   * Resolves when every event received so far for the run is on disk; at once for a closed or
   * unknown run. Rejects with the run's `LogWriteError` if its log failed.
   */
  flushed(runId: string): Promise<void>;
  /**
   * Stops listening and closes every open log once its queued writes are done. Flush the bus first
   * so that no event is still on its way. Failures go to `onError`, not to this promise.
   */
  close(): Promise<void>;
}

interface RunLog {
  writer: LogWriter | null;
  /** Events that came before the run's `run.started`, which names the file. */
  early: RunEvent[];
  /** `flushed()` calls that wait for the writer to exist. */
  starting: { resolve: () => void; reject: (error: LogWriteError) => void }[];
  /** Set once the terminal event is seen: settles when the log holds it and is closed. */
  done: Promise<void> | null;
  terminalSeq: number;
  failure: LogWriteError | null;
}

/**
 * Closed runs remembered by their terminal seq, to tell a redelivered event (ignored) from one that
 * came after the run's end (reported). A closed run's writer and state are dropped at once; only
 * this much is kept, and only for the most recent closed runs, so a long-lived process does not
 * grow with every run it has logged.
 */
const CLOSED_RUNS_KEPT = 10_000;

const TERMINAL: ReadonlySet<RunEvent['type']> = new Set(['run.completed', 'run.failed']);

/**
 * Subscribes to the events of every run and keeps one ordered log writer per run, opened when
 * the run's `run.started` arrives and closed once its terminal event is on disk. The bus handler
 * only queues (appending is synchronous), so the bus never waits for the disk and writes batch.
 */
export function createPersistenceActor(options: PersistenceActorOptions): PersistenceActor {
  const { bus, resolvePath, onError } = options;
  const subscribe = options.subscribe ?? ((handler) => subscribeEvents(bus, '*', handler));
  const runs = new Map<string, RunLog>();
  const closedRuns = new BoundedMap<string, number>(CLOSED_RUNS_KEPT);
  const newRun = (terminalSeq = 0): RunLog => ({
    writer: null,
    early: [],
    starting: [],
    done: null,
    terminalSeq,
    failure: null,
  });
  const report = (runId: string, run: RunLog, error: LogWriteError): void => {
    if (run.failure !== null) return;
    run.failure = error;
    onError(runId, error);
  };

  const start = (run: RunLog, event: RunOpening): LogWriter => {
    const writer = new LogWriter({
      path: resolvePath?.(event) ?? event.payload.logPath,
      runId: event.runId,
      // A resumed run's log must end right before the resume, as it did when the resume read it.
      ...(event.type === 'run.resumed' ? { continuesAt: event.seq } : {}),
      onError: (error) => report(event.runId, run, error),
    });
    run.writer = writer;
    for (const early of run.early) writer.append(early);
    run.early = [];
    for (const waiter of run.starting) waiter.resolve();
    run.starting = [];
    return writer;
  };

  const finish = (runId: string, run: RunLog, writer: LogWriter, seq: number): void => {
    run.terminalSeq = seq;
    // Close only once the terminal event is written: over NATS an earlier event may still be on its way.
    run.done = writer.finish().then(() => {
      runs.delete(runId);
      closedRuns.set(runId, seq);
    });
    // The writer has already told onError of any failure; flushed() callers get the rejection.
    run.done.catch(() => undefined);
  };

  const receive = (event: RunEvent): void => {
    const closedAt = closedRuns.get(event.runId);
    if (closedAt !== undefined) {
      // Everything up to the terminal event is in the closed log: this is a redelivery.
      if (event.seq <= closedAt) return;
      closedRuns.delete(event.runId);
      runs.set(event.runId, newRun(closedAt)); // failed just below, and kept to say so
    }
    let run = runs.get(event.runId);
    if (run === undefined) {
      run = newRun();
      runs.set(event.runId, run);
    }
    if (run.failure !== null) return; // the log already failed and was reported; the run is stopping
    if (run.terminalSeq > 0 && event.seq > run.terminalSeq) {
      const error = new LogWriteError(
        `${event.type} (seq ${event.seq}) of run ${event.runId} came after its terminal event`,
      );
      report(event.runId, run, error);
      return;
    }
    let writer = run.writer;
    if (writer === null) {
      if (event.type !== 'run.started' && event.type !== 'run.resumed') {
        run.early.push(event);
        if (TERMINAL.has(event.type)) run.terminalSeq = event.seq;
        return;
      }
      try {
        writer = start(run, event);
      } catch (error) {
        // A throwing resolvePath would otherwise leave the run's events buffered here forever.
        report(
          event.runId,
          run,
          new LogWriteError(`cannot choose the log of run ${event.runId}: ${String(error)}`, {
            cause: error,
          }),
        );
        return;
      }
    }
    try {
      writer.append(event);
    } catch (error) {
      report(
        event.runId,
        run,
        error instanceof LogWriteError ? error : new LogWriteError(String(error), { cause: error }),
      );
      return;
    }
    // A terminal event may have come before run.started and waited in `early`.
    if (TERMINAL.has(event.type)) finish(event.runId, run, writer, event.seq);
    else if (run.terminalSeq > 0) finish(event.runId, run, writer, run.terminalSeq);
  };

  const subscription = subscribe(
    options.acknowledgeAfterWrite
      ? (event) => {
          receive(event);
          return flushed(event.runId);
        }
      : receive,
  );

  const flushed = (runId: string): Promise<void> => {
    const run = runs.get(runId);
    if (run === undefined) return Promise.resolve();
    if (run.failure !== null) return Promise.reject(run.failure);
    if (run.done !== null) return run.done;
    if (run.writer !== null) return run.writer.flushed();
    return new Promise<void>((resolve, reject) => run.starting.push({ resolve, reject })).then(() =>
      flushed(runId),
    );
  };

  return {
    flushed,
    async close(): Promise<void> {
      subscription.unsubscribe();
      const closing: Promise<void>[] = [];
      for (const [runId, run] of runs) {
        if (run.writer !== null) closing.push(run.done ?? run.writer.close());
        else if (run.early.length > 0 || run.starting.length > 0) {
          const error = new LogWriteError(
            `${run.early.length} events of run ${runId} arrived without its run.started; they are in no log`,
          );
          report(runId, run, error);
          for (const waiter of run.starting) waiter.reject(error);
          run.starting = [];
          run.early = [];
        }
      }
      // Each failure has reached onError already; waiting for all keeps one bad log from leaving others open.
      await Promise.allSettled(closing);
    },
  };
}
