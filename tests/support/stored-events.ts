import { jetstreamManager } from '@nats-io/jetstream';
import { type ConnectionOptions, connect } from '@nats-io/transport-node';
import { readStored } from '../../src/bus/nats-stored.js';
import { streamOf } from '../../src/bus/nats-streams.js';
import type { RunEvent } from '../../src/schemas/index.js';

/**
 * Every event the stream `PGE_EVENTS` holds on `filter` (e.g. `pge.run.<runId>.evt.>`), read with
 * plain nats.js connected with `connection` (a client's credential suffices), in stream order, by
 * lookups from the stream's leader as pge's readers make them (`readStored`): everything stored,
 * so a duplicate shows.
 */
export async function storedEvents(connection: ConnectionOptions, filter: string): Promise<RunEvent[]> {
  const nc = await connect(connection);
  try {
    const stored = await readStored(await jetstreamManager(nc), streamOf(filter)!, filter);
    return stored.map((m) => JSON.parse(new TextDecoder().decode(m.data)) as RunEvent);
  } finally {
    await nc.close();
  }
}

/** The seqs 1..n, for comparing with the sorted seqs of a run's stored events. */
export const seqsUpTo = (n: number): number[] => Array.from({ length: n }, (_, i) => i + 1);
