import type { Bus, BusSubscription } from '../bus/bus.js';
import { subscribeEvents } from '../bus/channels.js';
import type { MessageRejection } from '../bus/codec.js';
import type { LogWriteError } from '../errors.js';
import type { RunEvent, RunOpening } from '../schemas/index.js';
import { createRejecter } from './persistence-support.js';
import { RunLogs } from './run-logs.js';
import { RunQueues } from './run-queues.js';
import { createStreamPlacement } from './stream-placement.js';

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
   * deployment passes a durable consumer, so a restarted persistence process misses nothing; with
   * `history`, each delivery settles once its event is on disk or reported.
   */
  subscribe?: (handler: (event: RunEvent) => void | Promise<void>) => BusSubscription;
  /**
   * Reads every event the transport keeps of a run, in the order it stored them (NATS:
   * `readRunEvents` on PGE_EVENTS). With it the actor writes a run it joined midway from its
   * start, fills seq gaps from it, and reports an event it cannot place on `pge.errors.rejected.<reporter>`
   * instead of waiting for it: one bad message never holds the subscription. Without it (the
   * in-process bus, where a run's events come in order) an event waits for its run's `run.started`.
   */
  history?: (runId: string) => Promise<readonly RunEvent[]>;
  /**
   * With `history`: reads the first event the transport keeps of a run (NATS: one lookup), so that
   * a run joined midway whose log already holds its start (a restarted worker's backlog) is opened
   * from its `run.started` alone; `history` is read only for what the log then lacks. Without it,
   * a run joined midway is read whole.
   */
  opening?: (runId: string) => Promise<RunEvent | null>;
  /**
   * Milliseconds a seq gap that `history` cannot fill may last before the run's log fails (default
   * 10 000): the events after it are held meanwhile, and delivery goes on.
   */
  gapWaitMs?: number;
  /** Told of every event the actor reported on `pge.errors.rejected.<reporter>` (`unpublished`: why the report did not go out). */
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

const DEFAULT_GAP_WAIT_MS = 10_000;

/**
 * Subscribes to the events of every run and keeps one ordered log writer per run (`RunLogs`),
 * opened when the run's `run.started` is known and closed once its closing event is on disk.
 * Appending is synchronous and writes batch, so the bus never waits for the disk longer than one
 * write. With `history`, events are placed from the stream (`createStreamPlacement`).
 */
export function createPersistenceActor(options: PersistenceActorOptions): PersistenceActor {
  const { bus, history } = options;
  const subscribe = options.subscribe ?? ((handler) => subscribeEvents(bus, '*', handler));
  const reject = createRejecter(bus, options.onRejected);
  const logs = new RunLogs({ resolvePath: options.resolvePath, onError: options.onError, reject });
  // A run's deliveries, and the checks of its gaps, are handled one at a time: a join reads the
  // stream while later events of the run may already be on their way. Runs go side by side.
  const queues = new RunQueues();

  /**
   * The in-process path: events of a run arrive in order, and wait for its `run.started` (or, for
   * a run resumed in this process, its `run.resumed`).
   */
  const receive = (event: RunEvent): void => {
    if (logs.settledAsClosed(event)) return;
    const run = logs.open(event.runId);
    if (run.failure !== null) return; // the log already failed and was reported; the run is stopping
    let writer = run.writer;
    if (writer === null) {
      if (event.type !== 'run.started' && event.type !== 'run.resumed') {
        run.early.push(event);
        return;
      }
      writer = logs.start(run, event);
      if (writer === null) return;
    }
    logs.accept(run, writer, event);
  };

  let handler: (event: RunEvent) => void | Promise<void> = receive;
  if (history !== undefined) {
    const place = createStreamPlacement({
      logs,
      read: history,
      ...(options.opening === undefined ? {} : { opening: options.opening }),
      gapWaitMs: options.gapWaitMs ?? DEFAULT_GAP_WAIT_MS,
      queues,
      reject,
    });
    // A run's events placed one at a time, written side by side: a delivery settles once its
    // event is on disk.
    handler = async (event) => (await queues.run(event.runId, () => place(event))).written;
  }
  const subscription = subscribe(handler);

  return {
    flushed: (runId) => logs.flushed(runId),
    async close(): Promise<void> {
      subscription.unsubscribe();
      // Once every placement and gap check queued before it has settled.
      await queues.idle();
      await logs.close();
    },
  };
}
