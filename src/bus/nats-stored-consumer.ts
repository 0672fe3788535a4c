import type { JetStreamClient, JetStreamManager, JsMsg } from '@nats-io/jetstream';

/**
 * Reading what a stream stores on a subject through nats.js's ordered consumer, for a process
 * whose credential may make consumers (the coordinator's: permissions.ts): a run taken over is
 * read in a few round trips, where lookups take one per message (nats-stored.ts).
 *
 * An ordered consumer is not served by the stream's leader on nats-server 2.9.10: an ephemeral R1
 * consumer is placed on a replica picked at random (`createGroupForConsumer`), which may lag behind
 * the leader or have stopped answering. So the leader says first which is the last message on the
 * subject (`last_by_subj`); the consumer reads up to it, however far behind its replica is; and
 * `readStored` ends the reading as every reader does, by lookups from the leader after the last
 * message read, the first of which normally finds nothing. A consumer that cannot be made, or
 * delivers nothing for `STALL_MS`, is given up and the rest is read by lookups. So what is read is
 * what lookups alone would read: every message the leader held, in stream order.
 */

/** Without a message for this long, the consumer is given up for lookups. */
const STALL_MS = 5_000;
/** Messages asked for in one pull. */
const BATCH = 256;

/**
 * Hands `take` what `stream` holds on `filter`, oldest first, through an ordered consumer, up to
 * the last message the stream's leader holds there now. Resolves with the stream sequence the
 * lookups that end the reading start from; rejects only when the leader does not answer.
 */
export async function consumeStored(
  js: JetStreamClient,
  jsm: JetStreamManager,
  stream: string,
  filter: string,
  take: (msg: JsMsg) => void,
): Promise<number> {
  const last = await jsm.streams.getMessage(stream, { last_by_subj: filter });
  if (last === null) return 1;
  let next = 1;
  try {
    const consumer = await js.consumers.get(stream, { filter_subjects: filter });
    try {
      const messages = await consumer.consume({ max_messages: BATCH, expires: STALL_MS });
      // Stopped when it stalls: the iteration then ends, and lookups read from `next`.
      const timer = setTimeout(() => messages.stop(), STALL_MS);
      try {
        for await (const msg of messages) {
          take(msg);
          next = msg.seq + 1;
          if (msg.seq >= last.seq) break;
          timer.refresh();
        }
      } finally {
        clearTimeout(timer);
        await messages.close().catch(() => undefined);
      }
    } finally {
      // Ephemeral, but it would stay on the server until its inactivity threshold otherwise.
      consumer.delete().catch(() => undefined);
    }
  } catch {
    // A consumer that cannot be made or read: lookups read the rest, from the leader.
  }
  return next;
}
