import { randomUUID } from 'node:crypto';
import type { ConsumerInfo, JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
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
  let info: ConsumerInfo;
  try {
    info = await jsm.consumers.add(stream.name, {
      // Named, so that the create names it in its subject (a reader's credential allows no other).
      name: `pge-read-${randomUUID()}`,
      filter_subject: filter,
      deliver_policy: DeliverPolicy.All,
      ack_policy: AckPolicy.None,
      mem_storage: true,
      inactive_threshold: nanos(INACTIVE_MS),
    });
  } catch (error) {
    throw busError(error, what);
  }
  // What matches when the consumer is made: messages stored after that are not asked for.
  const count = info.num_pending;
  const messages: StoredMessage[] = [];
  try {
    if (count === 0) return messages;
    const consumer = js.consumers.getConsumerFromInfo(info);
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
    // Not awaited, to save a round trip per read: the server removes the consumer after
    // INACTIVE_MS anyway, so a delete that fails leaves nothing behind for long.
    jsm.consumers.delete(stream.name, info.name).catch(() => undefined);
  }
}
