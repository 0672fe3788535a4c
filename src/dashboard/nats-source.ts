import { LRUCache } from 'lru-cache';
import type { BusSubscription } from '../bus/bus.js';
import { readEvents } from '../bus/channels.js';
import { NatsBus, type NatsBusOptions } from '../bus/nats-bus.js';
import type { RunEvent } from '../schemas/index.js';
import type { RunStore } from './run-store.js';

/**
 * Following every run of a distributed deployment: the events of all runs (`pge.run.*.evt.>`)
 * stored from the moment the dashboard joined, read from the stream through an ordered consumer,
 * so a reconnect or a server restart loses none. A run first seen midway (it started before the
 * dashboard) is read from its first event too, from the stream, up to where the live reading took
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
  /** Reads run `runId` from its first event up to `first`, the first one the live reading had. */
  const readBack = (runId: string, first: number) => {
    const subscription = readEvents(bus, runId, (event: RunEvent) => {
      // From `first` on, the stream is what the live reading reads (the store drops repeats).
      if (event.seq !== first) return store.add(event);
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
      if (event.seq > 1) readBack(event.runId, event.seq);
    },
    { from: 'new' },
  );
  return {
    async close() {
      live.unsubscribe();
      for (const subscription of earlier) subscription.unsubscribe();
      await bus.close();
    },
  };
}
