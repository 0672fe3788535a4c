import { readRunEvents, readRunOpening } from '../bus/channels.js';
import type { NatsBus } from '../bus/nats-bus.js';
import { PERSISTENCE_CONSUMER, PERSISTENCE_READING } from '../bus/nats-streams.js';
import { subjects } from '../bus/subjects.js';
import {
  createPersistenceActor,
  type PersistenceActor,
  type PersistenceActorOptions,
} from '../persistence/persistence-actor.js';
import type { RunEvent } from '../schemas/index.js';

/**
 * The persistence actor as the NATS deployment runs it (`pge worker --role persistence`): every
 * run's events from one durable consumer, in stream order and in batches, acknowledged (cumulatively)
 * once on disk or reported; the start of a run it joins midway, and any seq gap, read back from
 * PGE_EVENTS.
 */

/** Options of `startNatsPersistence`: the actor's, but for how it reads the bus. */
export type NatsPersistenceOptions = Omit<
  PersistenceActorOptions,
  'bus' | 'subscribe' | 'history' | 'opening'
> & {
  bus: NatsBus;
};

/** Starts the persistence actor on the durable consumer `pge-persistence`. */
export function startNatsPersistence(options: NatsPersistenceOptions): PersistenceActor {
  const { bus } = options;
  return createPersistenceActor({
    ...options,
    subscribe: (handler) =>
      bus.subscribeDurable(
        subjects.events('*'),
        PERSISTENCE_CONSUMER,
        (m) => handler(m.data as RunEvent),
        PERSISTENCE_READING,
      ),
    history: (runId) => readRunEvents(bus, runId),
    opening: (runId) => readRunOpening(bus, runId),
  });
}
