import { subscribeEvents } from '../bus/channels.js';
import { NatsBus, type NatsBusOptions } from '../bus/nats-bus.js';
import type { RunStore } from './run-store.js';

/**
 * Following every run of a distributed deployment: the events of all runs (`pge.run.*.evt.>`),
 * as they are published, into the store. Runs are seen from the moment the dashboard joined: the
 * subscription is core NATS, so the dashboard leaves no consumer behind on the server; a run that
 * started earlier shows from its next event on (its log has the whole of it).
 */

/** A NATS connection feeding the store. */
export interface NatsSource {
  close(): Promise<void>;
}

/**
 * Connects (rejecting with `ConfigurationError` when the server cannot be reached) and follows
 * every run's events into `store`. The bus validated each event before the handler sees it;
 * an invalid one is reported on `pge.errors.rejected`, not here.
 */
export async function followNats(options: NatsBusOptions, store: RunStore): Promise<NatsSource> {
  const bus = await NatsBus.connect({
    ...options,
    onHandlerError: (error, subject) => store.problem(`${subject}: ${String(error)}`),
  });
  const subscription = subscribeEvents(bus, '*', (event) => store.add(event));
  return {
    async close() {
      subscription.unsubscribe();
      await bus.close();
    },
  };
}
