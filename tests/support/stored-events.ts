import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { type ConnectionOptions, connect } from '@nats-io/transport-node';
import type { RunEvent } from '../../src/schemas/index.js';

/**
 * Every event the stream `PGE_EVENTS` holds on `filter` (e.g. `pge.run.<runId>.evt.>`), read with
 * plain nats.js connected with `connection` (a client's credential suffices), in stream order: as
 * many as the stream says it holds, so a duplicate shows.
 */
export async function storedEvents(connection: ConnectionOptions, filter: string): Promise<RunEvent[]> {
  const nc = await connect(connection);
  try {
    const info = await (await jetstreamManager(nc)).streams.info('PGE_EVENTS', { subjects_filter: filter });
    const count = Object.values(info.state.subjects ?? {}).reduce((n, c) => n + c, 0);
    const events: RunEvent[] = [];
    if (count === 0) return events;
    const consumer = await jetstream(nc).consumers.get('PGE_EVENTS', { filter_subjects: filter });
    const messages = await consumer.consume();
    for await (const m of messages) {
      events.push(m.json<RunEvent>());
      if (events.length === count) break;
    }
    return events;
  } finally {
    await nc.close();
  }
}

/** The seqs 1..n, for comparing with the sorted seqs of a run's stored events. */
export const seqsUpTo = (n: number): number[] => Array.from({ length: n }, (_, i) => i + 1);
