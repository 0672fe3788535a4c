import { jetstreamManager } from '@nats-io/jetstream';
import type { Subscription } from '@nats-io/transport-node';
import { describeError, WorkAbandonedError } from '../errors.js';
import type { RoleRequest } from '../schemas/index.js';
import { ROLE_OF_REQUEST } from '../schemas/index.js';
import { publishResult } from './channels.js';
import { decodeMessage } from './codec.js';
import type { NatsBus } from './nats-bus.js';
import { WORK_STREAM } from './nats-streams.js';

/**
 * Work items JetStream gave up on, answered with a failed result. A work item is delivered at most
 * `maxDeliver` times; when every worker that took it died or failed, the server stops delivering
 * it and says so on its max-deliveries advisory. Without an answer the run that asked would wait
 * for its call deadline; with this it goes on at once, as after any failed call.
 *
 * Every coordinator may run it: the failed result is stored once (its message id is the
 * request's, as a worker's result would be), and the item is then removed from the queue.
 */

/** The advisory the server publishes when a message reached its consumer's `max_deliver`. */
const MAX_DELIVERIES = `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.${WORK_STREAM}.*`;

/** The name failed results of abandoned work carry as their worker. */
export const ABANDONED_WORKER = 'jetstream';

interface MaxDeliveriesAdvisory {
  stream_seq: number;
  deliveries: number;
}

/** Starts answering abandoned work on `bus`; `stop` ends it. Failures go to `report`. */
export function answerAbandonedWork(
  bus: NatsBus,
  report: (error: unknown, subject: string) => void,
): { stop(): void } {
  const nc = bus.connection;

  async function answer(advisory: MaxDeliveriesAdvisory): Promise<void> {
    const manager = await jetstreamManager(nc);
    const stored = await manager.streams
      .getMessage(WORK_STREAM, { seq: advisory.stream_seq })
      .catch(() => null); // another coordinator answered it and removed it first
    if (stored === null) return;
    const request = decodeMessage(stored.subject, stored.data) as RoleRequest;
    const error = new WorkAbandonedError(
      `${request.type} ${request.id} was delivered ${advisory.deliveries} times and no worker finished it`,
    );
    await publishResult(bus, {
      requestId: request.id,
      runId: request.runId,
      role: ROLE_OF_REQUEST[request.type],
      worker: ABANDONED_WORKER,
      calls: [],
      result: { status: 'error', phase: request.payload.phase, error: describeError(error), raw: null },
    });
    await manager.streams.deleteMessage(WORK_STREAM, advisory.stream_seq).catch(() => false);
  }

  const subscription: Subscription = nc.subscribe(MAX_DELIVERIES, {
    callback: (error, msg) => {
      if (error) return report(error, MAX_DELIVERIES);
      let advisory: MaxDeliveriesAdvisory;
      try {
        advisory = msg.json<MaxDeliveriesAdvisory>();
      } catch (cause) {
        return report(cause, msg.subject);
      }
      answer(advisory).catch((failure: unknown) => report(failure, msg.subject));
    },
  });
  return { stop: () => subscription.unsubscribe() };
}
