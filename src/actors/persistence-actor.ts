import { BoundedMap } from '../bounded-map.js';
import type { Bus, BusSubscription } from '../bus/bus.js';
import { subscribeEvents } from '../bus/channels.js';
import type { MessageRejection } from '../bus/codec.js';
import { LogWriteError } from '../errors.js';
import { LogWriter } from '../persistence/index.js';
import { isClosingEvent, type RunEvent, type RunEventOf } from '../schemas/index.js';
import { createRejecter, Serial } from './persistence-support.js';

/** Options of `createPersistenceActor`. */
export interface PersistenceActorOptions {
  bus: Bus;
  /** Where a run's log goes; default: the `logPath` of its `run.started` event. */
  resolvePath?: (event: RunEventOf<'run.started'>) => string;
  /**
   * How to receive every run's events; default a plain subscription to `pge.run.*.evt.>`. The NATS
   * deployment passes a durable consumer, so a restarted persistence process misses nothing; with
   * `history`, each delivery settles once its event is on disk or reported.
   */
  subscribe?: (handler: (event: RunEvent) => void | Promise<void>) => BusSubscription;
  /**
   * Reads every event the transport keeps of a run, in the order it stored them (NATS:
   * `readRunEvents` on PGE_EVENTS). With it the actor writes a run it joined midway from its
   * start, fills seq gaps from it, and reports an event it cannot place on `pge.errors.rejected`
   * instead of waiting for it: one bad message never holds the subscription. Without it (the
   * in-process bus, where a run's events come in order) an event waits for its run's `run.started`.
   */
  history?: (runId: string) => Promise<readonly RunEvent[]>;
  /**
   * Milliseconds a seq gap that `history` cannot fill may last before the run's log fails (default
   * 10 000): the events after it are held meanwhile, and delivery goes on.
   */
  gapWaitMs?: number;
  /** Told of every event the actor reported on `pge.errors.rejected` (`unpublished`: why the report did not go out). */
  onRejected?: (rejection: MessageRejection, unpublished?: unknown) => void;
  /** Told of every failure to write a run's log; that run must stop, since the log is not best-effort. */
  onError: (runId: string, error: LogWriteError) => void;
}

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
  /** Events that came before the run's `run.started`, which names the file (in-process only). */
  early: RunEvent[];
  /** `flushed()` calls that wait for the writer to exist. */
  starting: { resolve: () => void; reject: (error: LogWriteError) => void }[];
  /** Set once the closing event is seen: settles when the log holds it and is closed. */
  done: Promise<void> | null;
  terminalSeq: number;
  failure: LogWriteError | null;
  /** Set while a seq gap that the history could not fill is given time to fill. */
  gapTimer: NodeJS.Timeout | null;
}

/**
 * Closed runs remembered by their terminal seq, to tell a redelivered event (ignored) from one that
 * came after the run's end (reported). A closed run's writer and state are dropped at once; only
 * this much is kept, and only for the most recent closed runs, so a long-lived process does not
 * grow with every run it has logged. Runs found to have no `run.started` are remembered likewise.
 */
const RUNS_REMEMBERED = 10_000;
const DEFAULT_GAP_WAIT_MS = 10_000;

/**
 * Subscribes to the events of every run and keeps one ordered log writer per run, opened when
 * the run's `run.started` is known and closed once its closing event is on disk. Appending is
 * synchronous and writes batch, so the bus never waits for the disk longer than one write.
 */
export function createPersistenceActor(options: PersistenceActorOptions): PersistenceActor {
  const { bus, resolvePath, onError, history } = options;
  const gapWaitMs = options.gapWaitMs ?? DEFAULT_GAP_WAIT_MS;
  const subscribe = options.subscribe ?? ((handler) => subscribeEvents(bus, '*', handler));
  const runs = new Map<string, RunLog>();
  const closedRuns = new BoundedMap<string, number>(RUNS_REMEMBERED);
  const orphans = new BoundedMap<string, true>(RUNS_REMEMBERED);
  const reject = createRejecter(bus, options.onRejected);
  // Deliveries, and the checks of gaps, are handled one at a time: a join reads the stream while
  // later events of the run may already be on their way.
  const serial = new Serial();
  const newRun = (terminalSeq = 0): RunLog => ({
    writer: null,
    early: [],
    starting: [],
    done: null,
    terminalSeq,
    failure: null,
    gapTimer: null,
  });
  const report = (runId: string, run: RunLog, error: LogWriteError): void => {
    if (run.failure !== null) return;
    run.failure = error;
    onError(runId, error);
  };

  /** Opens the run's log, or reports why it cannot be chosen. */
  const start = (run: RunLog, event: RunEventOf<'run.started'>): LogWriter | null => {
    let path: string;
    try {
      path = resolvePath?.(event) ?? event.payload.logPath;
    } catch (error) {
      const message = `cannot choose the log of run ${event.runId}: ${String(error)}`;
      report(event.runId, run, new LogWriteError(message, { cause: error }));
      return null;
    }
    const writer = new LogWriter({
      path,
      runId: event.runId,
      onError: (error) => report(event.runId, run, error),
    });
    run.writer = writer;
    for (const early of run.early) accept(run, writer, early);
    run.early = [];
    for (const waiter of run.starting) waiter.resolve();
    run.starting = [];
    return writer;
  };

  /** Closes the log once its closing event is written: over NATS an earlier event may still be on its way. */
  const finish = (runId: string, run: RunLog, writer: LogWriter): void => {
    if (run.done !== null) return;
    run.done = writer.finish().then(() => {
      if (run.gapTimer !== null) clearTimeout(run.gapTimer);
      runs.delete(runId);
      closedRuns.set(runId, run.terminalSeq);
    });
    // The writer has already told onError of any failure; flushed() callers get the rejection.
    run.done.catch(() => undefined);
  };

  /**
   * Appends one event to an open log. An event after the run's closing event is reported on
   * `pge.errors.rejected` (`quiet`: left to the event's own delivery to report).
   */
  const accept = (run: RunLog, writer: LogWriter, event: RunEvent, quiet = false): void => {
    if (run.failure !== null) return;
    if (run.terminalSeq > 0 && event.seq > run.terminalSeq) {
      if (!quiet) reject(event, `came after its closing event (seq ${run.terminalSeq})`);
      return;
    }
    if (isClosingEvent(event)) {
      // The writer drops what it holds above the closing event; those events are in no log.
      for (const held of writer.waiting())
        if (held.seq > event.seq) reject(held, `came after its closing event (seq ${event.seq})`);
      run.terminalSeq = event.seq;
    }
    try {
      writer.append(event);
    } catch (error) {
      const failure =
        error instanceof LogWriteError ? error : new LogWriteError(String(error), { cause: error });
      report(event.runId, run, failure);
      return;
    }
    if (run.terminalSeq > 0) finish(event.runId, run, writer);
  };

  /** The in-process path: events of a run arrive in order, and wait for its `run.started`. */
  const receive = (event: RunEvent): void => {
    const closedAt = closedRuns.get(event.runId);
    if (closedAt !== undefined) {
      // Everything up to the closing event is in the closed log: this is a redelivery.
      if (event.seq > closedAt) reject(event, `came after its closing event (seq ${closedAt})`);
      return;
    }
    let run = runs.get(event.runId);
    if (run === undefined) {
      run = newRun();
      runs.set(event.runId, run);
    }
    if (run.failure !== null) return; // the log already failed and was reported; the run is stopping
    let writer = run.writer;
    if (writer === null) {
      if (event.type !== 'run.started') {
        run.early.push(event);
        return;
      }
      writer = start(run, event);
      if (writer === null) return;
    }
    accept(run, writer, event);
  };

  /**
   * The stream-backed path: resolves once the event is on disk, or known to be in no log (reported),
   * or held behind a gap that is given `gapWaitMs` to fill.
   */
  const place = async (event: RunEvent, read: NonNullable<typeof history>): Promise<void> => {
    const closedAt = closedRuns.get(event.runId);
    if (closedAt !== undefined) {
      if (event.seq > closedAt) reject(event, `came after its closing event (seq ${closedAt})`);
      return;
    }
    let run = runs.get(event.runId);
    if (run?.failure) return; // reported already, and the run is being stopped
    if (run?.writer) accept(run, run.writer, event);
    else run = await join(event, read);
    const writer = run?.writer;
    if (run === undefined || writer == null) return;
    await writer.ready.catch(() => undefined); // a failure to open is reported through onError
    if (writer.missingSeq !== null) await fill(run, writer, read);
    if (run.failure !== null) return;
    if (writer.missingSeq !== null) {
      awaitGap(event.runId, run, writer, read);
      return;
    }
    // A failed write has reached onError, which stops the run: the message has nothing left to wait for.
    await (run.done ?? writer.flushed()).catch(() => undefined);
  };

  /** Opens the log of a run first seen midway (or of no run at all): its start is in the stream. */
  const join = async (event: RunEvent, read: NonNullable<typeof history>): Promise<RunLog | undefined> => {
    const { runId } = event;
    // A run.started seen first needs no history, unless earlier events of its run were refused.
    const stored = event.type === 'run.started' && orphans.get(runId) === undefined ? [] : await read(runId);
    const started =
      event.type === 'run.started'
        ? event
        : stored.find((e): e is RunEventOf<'run.started'> => e.type === 'run.started');
    if (started === undefined) {
      orphans.set(runId, true);
      reject(event, 'cannot be placed: the run has no run.started (no run of that id was started)');
      return undefined;
    }
    orphans.delete(runId);
    const run = runs.get(runId) ?? newRun();
    runs.set(runId, run);
    const writer = start(run, started);
    if (writer === null) return run;
    for (const earlier of stored) accept(run, writer, earlier, true);
    accept(run, writer, event);
    return run;
  };

  /** Appends what the stream holds of the run: the events a gap waits for, if they were stored. */
  const fill = async (run: RunLog, writer: LogWriter, read: NonNullable<typeof history>): Promise<void> => {
    let stored: readonly RunEvent[];
    try {
      stored = await read(writer.runId);
    } catch {
      return; // the gap stays, and is looked at again when its time is up
    }
    for (const event of stored) accept(run, writer, event, true);
    await writer.ready.catch(() => undefined);
  };

  /** Gives a gap `gapWaitMs` to fill (events published late, delivered later); then the log fails. */
  const awaitGap = (runId: string, run: RunLog, writer: LogWriter, read: NonNullable<typeof history>) => {
    if (run.gapTimer !== null) return;
    const missing = writer.missingSeq;
    run.gapTimer = setTimeout(() => {
      run.gapTimer = null;
      const check = serial.run(async () => {
        if (run.failure !== null || writer.missingSeq === null) return;
        await fill(run, writer, read);
        if (run.failure !== null || writer.missingSeq === null) return;
        if (writer.missingSeq !== missing) return awaitGap(runId, run, writer, read);
        const waiting = writer.waiting();
        for (const event of waiting)
          reject(event, `cannot be placed: seq ${missing} never reached the stream within ${gapWaitMs} ms`);
        const message = `seq ${missing} of run ${runId} never reached the stream within ${gapWaitMs} ms; ${waiting.length} later events are in no log`;
        report(runId, run, new LogWriteError(message));
        // Closing fails for the events it holds; that failure is the one just reported.
        writer.close().catch(() => undefined);
      });
      // Only reading the stream can fail in there, and fill() catches that: this is a bug if it fires.
      check.catch((error: unknown) =>
        report(runId, run, new LogWriteError(`cannot check the gap at seq ${missing}: ${String(error)}`)),
      );
    }, gapWaitMs);
  };

  const subscription = subscribe(
    history === undefined ? receive : (event) => serial.run(() => place(event, history)),
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
      await serial.idle();
      const closing: Promise<void>[] = [];
      for (const [runId, run] of runs) {
        if (run.gapTimer !== null) clearTimeout(run.gapTimer);
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
