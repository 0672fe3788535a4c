import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { AckPolicy, DeliverPolicy } from '@nats-io/jetstream';
import { nanos } from '@nats-io/transport-node';
import { BusError } from '../errors.js';
import { busError } from './nats-helpers.js';
import type { PgeStream } from './nats-streams.js';

/**
 * Reading back what a stream holds on a subject, from its first message: how a reader that joined
 * late (a restarted persistence worker) gets the part of a run it never received. The read goes
 * through a throwaway consumer (no acks, in memory, deleted after the read, and removed by the
 * server if this process dies first), which streams the messages in batches rather than one
 * request per message. Only features of nats-server 2.9 are used.
 */

/** A message as the stream stored it. */
export interface StoredMessage {
  readonly subject: string;
  readonly data: Uint8Array;
}

/** Messages asked for in one pull. */
const BATCH = 256;
/** How long one pull waits for messages the consumer said it has. */
const PULL_EXPIRES_MS = 5_000;
/** How long the server keeps the consumer of a reader that died before deleting it. */
const INACTIVE_MS = 30_000;

/**
 * Every message `stream` holds on `filter` (a subject or a filter within the stream) at the time
 * of the call, oldest first. Rejects with `BusError` when the server does not answer or stops
 * delivering what it said it held.
 */
export async function readStored(
  js: JetStreamClient,
  jsm: JetStreamManager,
  stream: PgeStream,
  filter: string,
): Promise<StoredMessage[]> {
  const what = `cannot read ${filter} from ${stream.name}`;
  let name: string;
  let count: number;
  try {
    const info = await jsm.consumers.add(stream.name, {
      filter_subject: filter,
      deliver_policy: DeliverPolicy.All,
      ack_policy: AckPolicy.None,
      mem_storage: true,
      inactive_threshold: nanos(INACTIVE_MS),
    });
    name = info.name;
    // What matches when the consumer is made: messages stored after that are not asked for.
    count = info.num_pending;
  } catch (error) {
    throw busError(error, what);
  }
  const messages: StoredMessage[] = [];
  try {
    if (count === 0) return messages;
    const consumer = await js.consumers.get(stream.name, name);
    while (messages.length < count) {
      const before = messages.length;
      const batch = await consumer.fetch({
        max_messages: Math.min(BATCH, count - messages.length),
        expires: PULL_EXPIRES_MS,
      });
      for await (const m of batch) messages.push({ subject: m.subject, data: m.data });
      if (messages.length === before) {
        throw new BusError(`${what}: ${count - before} of the ${count} messages it held never came`);
      }
    }
    return messages;
  } catch (error) {
    throw busError(error, what);
  } finally {
    // The server removes it after INACTIVE_MS anyway: a failed delete leaves nothing for long.
    await jsm.consumers.delete(stream.name, name).catch(() => undefined);
  }
}
