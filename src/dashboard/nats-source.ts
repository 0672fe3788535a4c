import { LRUCache } from 'lru-cache';
import type { BusSubscription } from '../bus/bus.js';
import { readEvents } from '../bus/channels.js';
import { NatsBus, type NatsBusOptions } from '../bus/nats-bus.js';
import { subjects } from '../bus/subjects.js';
import { describeError } from '../errors.js';
import { runLevelEvents } from '../runtime/run-list.js';
import type { RunEvent } from '../schemas/index.js';
import type { RunStore } from './run-store.js';

/**
 * Following every run of a distributed deployment: the events of all runs (`pge.run.*.evt.>`)
 * stored from the moment the dashboard joined, read from the stream through an ordered consumer,
 * so a reconnect or a server restart loses none. Every run the stream held when the dashboard
 * joined is read from its first event up to its latest then (a run waiting at a gate sends
 * nothing until a person decides: it must be listed all the same), newest runs first, and a run
 * first seen midway on the live reading is read back from its first event up to where that took
 * it up. The consumers are ephemeral: the dashboard leaves nothing behind on the server.
 */

/** A NATS connection feeding the store. */
export interface NatsSource {
  close(): Promise<void>;
}

/** Runs remembered as seen, so that each is read back from its start once. */
const RUNS_REMEMBERED = 10_000;

/**
 * Connects (rejecting with `ConfigurationError` when the server cannot be reached) and follows
 * every run's events into `store`. The bus validated each event before the handler sees it;
 * an invalid one is reported on `pge.errors.rejected.<reporter>`, not here.
 */
export async function followNats(options: NatsBusOptions, store: RunStore): Promise<NatsSource> {
  const bus = await NatsBus.connect({
    ...options,
    onHandlerError: (error, subject) => store.problem(`${subject}: ${String(error)}`),
  });
  const seen = new LRUCache<string, true>({ max: RUNS_REMEMBERED });
  const earlier = new Set<BusSubscription>();
  /** Reads run `runId` from its first event up to seq `last` (the rest is the live reading's). */
  const readBack = (runId: string, last: number) => {
    const subscription = readEvents(bus, runId, (event: RunEvent) => {
      store.add(event);
      if (event.seq < last) return;
      subscription.unsubscribe();
      earlier.delete(subscription);
    });
    earlier.add(subscription);
  };
  const live = readEvents(
    bus,
    '*',
    (event) => {
      store.add(event);
      if (seen.get(event.runId)) return;
      seen.set(event.runId, true);
      if (event.seq > 1) readBack(event.runId, event.seq - 1);
    },
    { from: 'new' },
  );
  // Listed once the live reading is on: what the stream stores from now on, that reading has.
  readStoredRuns(bus, seen, readBack).catch((error: unknown) =>
    store.problem(`the runs stored before the dashboard joined: ${describeError(error).message}`),
  );
  return {
    async close() {
      live.unsubscribe();
      for (const subscription of earlier) subscription.unsubscribe();
      await bus.close();
    },
  };
}

/**
 * Reads back every run the stream holds (its run-level events name them), newest start first, up to
 * `RUNS_REMEMBERED`: each up to its latest event now, unless the live reading has seen it already.
 */
async function readStoredRuns(
  bus: NatsBus,
  seen: LRUCache<string, true>,
  readBack: (runId: string, last: number) => void,
): Promise<void> {
  // Once the live reading has its consumer: an event stored after a run's latest read here is its.
  await bus.flush();
  const runIds = [...new Set((await runLevelEvents(bus, '*')).map((e) => e.runId))];
  for (const runId of runIds.reverse().slice(0, RUNS_REMEMBERED)) {
    if (seen.get(runId)) continue;
    const latest = (await bus.lastStored(subjects.events(runId))) as RunEvent | null;
    if (latest === null || seen.get(runId)) continue;
    seen.set(runId, true);
    readBack(runId, latest.seq);
  }
}
