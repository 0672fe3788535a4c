import type { Bus } from '../bus/bus.js';
import { readEvents } from '../bus/channels.js';
import { BusError } from '../errors.js';
import type { RunEvent, RunEventOf } from '../schemas/index.js';

/**
 * Following one run from outside its coordinator: its events, read from the stream from the first
 * (so a follower that starts late, reconnects or outlives a server restart misses none), handed
 * over once each in `seq` order, until the closing event. A follower that sees no progress for a
 * while gives up rather than wait for ever: the run may go on, and can be followed again.
 */

/** The closing event of a run. */
export type ClosingEvent = RunEventOf<'run.completed'> | RunEventOf<'run.failed'>;

/** Options of `followRun`. */
export interface FollowRunOptions {
  /** Told of every event of the run, once each, in `seq` order. */
  onEvent?: (event: RunEvent) => void;
  /**
   * Milliseconds without the run's next event after which `closing` rejects with a `BusError`
   * (the first wait counts from the start of following). Default: no limit.
   */
  idleTimeoutMs?: number;
}

/** A run being followed. */
export interface RunFollower {
  readonly runId: string;
  /** Resolves with the closing event; rejects with a `BusError` when no progress came in time. */
  readonly closing: Promise<ClosingEvent>;
  /** The `seq` of the last event handed over, 0 before the first. */
  lastSeq(): number;
  /** How many events have arrived, including those that wait for a lower seq. */
  received(): number;
  /** Stops following (`closing` then stays pending). */
  stop(): void;
}

/** Follows run `runId` on `bus` (see the module's description). */
export function followRun(bus: Bus, runId: string, options: FollowRunOptions = {}): RunFollower {
  const { onEvent = () => {}, idleTimeoutMs } = options;
  let settle!: (event: ClosingEvent) => void;
  let fail!: (error: BusError) => void;
  const closing = new Promise<ClosingEvent>((resolve, reject) => {
    settle = resolve;
    fail = reject;
  });
  let timer: NodeJS.Timeout | null = null;
  let stopped = false;
  const stop = () => {
    stopped = true;
    if (timer) clearTimeout(timer);
    subscription.unsubscribe();
  };
  const watch = () => {
    if (idleTimeoutMs === undefined) return;
    if (timer) clearTimeout(timer);
    timer = setTimeout(() => {
      stop();
      const after = next > 1 ? `after event ${next - 1} (${lastType})` : 'before its first event';
      fail(new BusError(`no progress of run ${runId} for ${seconds(idleTimeoutMs)} ${after}`));
    }, idleTimeoutMs);
  };
  // The stream holds a run's events in the order they were stored, which an outage can leave out
  // of `seq` order (an event sent again lands after one sent later): hand them over by seq.
  const early = new Map<number, RunEvent>();
  let next = 1;
  let lastType = '';
  let received = 0;
  const subscription = readEvents(bus, runId, (event) => {
    if (stopped || event.seq < next || early.has(event.seq)) return;
    received++;
    early.set(event.seq, event);
    for (let e = early.get(next); e; e = early.get(next)) {
      early.delete(next);
      next++;
      lastType = e.type;
      watch();
      onEvent(e);
      if (e.type === 'run.completed' || e.type === 'run.failed') {
        stop();
        settle(e);
        return;
      }
    }
  });
  watch();
  return { runId, closing, lastSeq: () => next - 1, received: () => received, stop };
}

/** `150 ms`, `1.5 s`, `90 s`, `10 min`. */
export function seconds(ms: number): string {
  if (ms < 1000) return `${ms} ms`;
  if (ms >= 120_000 && ms % 60_000 === 0) return `${ms / 60_000} min`;
  return `${Math.round(ms / 100) / 10} s`;
}
