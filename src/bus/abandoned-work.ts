import { jetstreamManager } from '@nats-io/jetstream';
import type { Subscription } from '@nats-io/transport-node';
import { describeError, WorkAbandonedError } from '../errors.js';
import type { RoleRequest } from '../schemas/index.js';
import { ROLE_OF_REQUEST, ROLES } from '../schemas/index.js';
import { publishResult } from './channels.js';
import { decodeMessage } from './codec.js';
import type { NatsBus } from './nats-bus.js';
import { EVENTS_STREAM, requestsGivenUp } from './nats-streams.js';

/**
 * Requests JetStream gave up on, answered with a failed result. A request is delivered to its
 * role's workers at most `maxDeliver` times; when every worker that took it died or failed, the
 * server stops delivering it and says so on its max-deliveries advisory. Without an answer the run
 * that asked would wait for its call deadline; with this it goes on at once, as after any failed
 * call.
 *
 * Every coordinator may run it: the failed result is stored once (its message id is the
 * request's, as a worker's result would be). The request stays in PGE_EVENTS, the run's record.
 */

interface MaxDeliveriesAdvisory {
  stream_seq: number;
  deliveries: number;
}

/** The name failed results of abandoned work carry as their worker. */
export const ABANDONED_WORKER = 'jetstream';

/** Starts answering abandoned requests on `bus`; `stop` ends it. Failures go to `report`. */
export function answerAbandonedWork(
  bus: NatsBus,
  report: (error: unknown, subject: string) => void,
): { stop(): void } {
  const nc = bus.connection;

  async function answer(advisory: MaxDeliveriesAdvisory): Promise<void> {
    const manager = await jetstreamManager(nc);
    const stored = await manager.streams.getMessage(EVENTS_STREAM, { seq: advisory.stream_seq });
    // Gone past the stream's limits: nobody waits for it any more.
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
  }

  const subscribe = (advisories: string): Subscription =>
    nc.subscribe(advisories, {
      callback: (error, msg) => {
        if (error) return report(error, advisories);
        let advisory: MaxDeliveriesAdvisory;
        try {
          advisory = msg.json<MaxDeliveriesAdvisory>();
        } catch (cause) {
          return report(cause, msg.subject);
        }
        answer(advisory).catch((failure: unknown) => report(failure, msg.subject));
      },
    });
  // One role's consumer each: PGE_EVENTS has the persistence consumer too, whose events are no requests.
  const subscriptions = ROLES.map((role) => subscribe(requestsGivenUp(role)));
  return {
    stop: () => {
      for (const subscription of subscriptions) subscription.unsubscribe();
    },
  };
}
