import { jetstreamManager } from '@nats-io/jetstream';
import { type ConnectionOptions, connect } from '@nats-io/transport-node';
import { readStored } from '../../src/bus/nats-stored.js';
import { streamOf, WORK_STREAM } from '../../src/bus/nats-streams.js';
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

/**
 * What the cluster holds of the run of `task` that a client still waits for, for a test's failure
 * message: the run's stored events (seq, type, request id), the results stored for it, and each
 * role's work consumer (pending, waiting for an ack, redelivered). Read as `admin`; never throws.
 */
export async function describeStuckRun(connection: ConnectionOptions, task: string): Promise<string> {
  try {
    const starts = await storedEvents(connection, 'pge.run.*.evt.run.started');
    const start = starts.find((e) => e.type === 'run.started' && e.payload.task === task);
    if (start === undefined) return `${task}: no run.started stored`;
    const events = await storedEvents(connection, `pge.run.${start.runId}.evt.>`);
    const results = (await storedEvents(connection, `pge.run.${start.runId}.result.*`)) as unknown as {
      requestId: string;
      worker: string;
    }[];
    const lines = [`${task}: run ${start.runId}, events stored:`];
    for (const e of events) {
      const request = 'requestId' in e.payload ? ` (request ${String(e.payload.requestId)})` : '';
      lines.push(`  ${e.seq} ${e.type} ${e.id}${request} at ${e.ts}`);
    }
    lines.push(`results stored: ${results.map((r) => `${r.requestId} by ${r.worker}`).join(', ') || 'none'}`);
    const nc = await connect(connection);
    try {
      const jsm = await jetstreamManager(nc);
      for await (const consumer of jsm.consumers.list(WORK_STREAM)) {
        const { name, num_pending, num_ack_pending, num_redelivered, num_waiting, cluster } = consumer;
        lines.push(
          `consumer ${name}: pending ${num_pending}, ack pending ${num_ack_pending}, redelivered ${num_redelivered}, waiting pulls ${num_waiting}, leader ${cluster?.leader}`,
        );
      }
    } finally {
      await nc.close();
    }
    return lines.join('\n');
  } catch (error) {
    return `${task}: cannot be described (${String(error)})`;
  }
}
