import type { JetStreamClient, PubAck } from '@nats-io/jetstream';
import { JetStreamApiError } from '@nats-io/jetstream';
import { type MsgHdrs, errors as natsErrors } from '@nats-io/transport-node';
import { BusError } from '../errors.js';
import { type Backoff, retry } from '../retry.js';
import { DUPLICATE_WINDOW_MS } from '../schemas/setting-values.js';
import { busError, hasCause, isNoResponders } from './nats-helpers.js';

/**
 * Storing a message in JetStream until the stream acknowledges it. A publish whose acknowledgement
 * does not come (the server restarts, the connection drops, JetStream is still recovering) may or
 * may not have been stored; it is sent again with the same `Nats-Msg-Id`, and the stream stores it
 * once: a second copy inside the duplicate window is acknowledged as a duplicate and dropped. So
 * a run's events are all stored (no seq gap) and none twice, across reconnects and restarts.
 */

/** How long one attempt waits for the stream's acknowledgement; a slow one only costs a dropped duplicate. */
export const PUBLISH_ATTEMPT_MS = 2_000;
/** The longest a message may be sent again: a copy sent after the duplicate window would be stored twice. */
export const MAX_PUBLISH_RETRY_MS = DUPLICATE_WINDOW_MS - PUBLISH_ATTEMPT_MS;
const LOST = Symbol('lost');
/** Pauses between attempts. */
const PUBLISH_RETRY: Backoff = { firstMs: 100, maxMs: 2_000 };

/** When to stop sending a message again. */
export interface StorePolicy {
  /** Milliseconds from the first attempt after which a message is given up. */
  readonly retryMs: number;
  /** True once the bus is closed: retrying stops. */
  isClosed(): boolean;
  /** Calls `listener` at each reconnect (an attempt under way is then lost) until told to stop. */
  onReconnect(listener: () => void): () => void;
  /** Told of each attempt answered "no responders", with when the first was (`ServerMove`). */
  unserved(since: number): void;
  /** Told when a message is stored. */
  served(): void;
}

/**
 * True for a failure of the transport, after which the same message may be sent again: no
 * acknowledgement in time, no responders (JetStream not ready after a restart, or the stream's
 * leader not yet elected), a request cut off by a disconnect, or JetStream saying it is
 * temporarily unavailable (503). A refusal of the message itself (a 4xx of the stream, a payload
 * too large, a closed connection) is not.
 */
export function isTransportFailure(error: unknown): boolean {
  if (
    hasCause(error, natsErrors.ClosedConnectionError) ||
    hasCause(error, natsErrors.DrainingConnectionError)
  )
    return false;
  if (hasCause(error, natsErrors.TimeoutError) || hasCause(error, natsErrors.NoRespondersError)) return true;
  // "connection disconnected", "connection closed" while reconnecting: the request was lost in flight.
  if (error instanceof natsErrors.RequestError) return true;
  return error instanceof JetStreamApiError && error.status === 503;
}

/**
 * Publishes `bytes` on `subject` with `msgID` until the stream acknowledges it, and resolves with
 * the acknowledgement (`duplicate` when a message of that id was stored already, at `seq`). Retries
 * transport failures only, with growing waits, for at most `policy.retryMs` from `started` (when
 * the message was published: one that waited its turn has waited part of it); rejects with a
 * `BusError` at once on any other failure, and when the bus closes or the bound passes, saying how
 * many attempts failed; with `signal`'s reason once it is aborted, in a wait or before an attempt.
 */
export async function storeUntilAcknowledged(
  js: JetStreamClient,
  subject: string,
  bytes: Uint8Array,
  msgID: string,
  policy: StorePolicy,
  {
    headers,
    started = Date.now(),
    signal,
  }: { headers?: MsgHdrs; started?: number; signal?: AbortSignal } = {},
): Promise<PubAck> {
  let unservedSince: number | null = null;
  const attempt = async (): Promise<PubAck> => {
    // The last attempt waits no longer than the bound: a publish gives up on time.
    const timeout = Math.max(1, Math.min(PUBLISH_ATTEMPT_MS, policy.retryMs - (Date.now() - started)));
    const sent = js.publish(subject, bytes, { msgID, timeout, headers });
    let unlisten = () => {};
    const lost = new Promise<typeof LOST>((resolve) => {
      unlisten = policy.onReconnect(() => resolve(LOST));
    });
    try {
      const outcome = await Promise.race([sent, lost]).finally(unlisten);
      if (outcome !== LOST) {
        policy.served();
        return outcome;
      }
      // The request went with the old connection: send it again now rather than at its timeout.
      sent.catch(() => undefined);
      throw new natsErrors.RequestError('the connection was re-established before the acknowledgement');
    } catch (error) {
      // A timeout or a lost attempt neither starts nor ends it: "no responders" is the server's own answer.
      if (isTransportFailure(error) && isNoResponders(error)) {
        unservedSince ??= Date.now();
        policy.unserved(unservedSince);
      }
      throw error;
    }
  };
  const giveUp = (error: unknown, attempts: number): BusError => {
    if (!isTransportFailure(error)) return busError(error, `cannot publish on ${subject}`);
    const elapsed = Date.now() - started;
    const reason = error instanceof Error ? error.message : String(error);
    const tried = `${attempts} attempt${attempts > 1 ? 's' : ''} over ${elapsed} ms, the last: ${reason}`;
    if (policy.isClosed()) {
      return new BusError(
        `cannot publish on ${subject}: the bus closed before JetStream stored it (${tried})`,
        { cause: error },
      );
    }
    return new BusError(
      `cannot publish on ${subject}: JetStream did not acknowledge it within ${policy.retryMs} ms (${tried})`,
      { cause: error },
    );
  };
  return retry(attempt, {
    ...PUBLISH_RETRY,
    retryable: (error) => isTransportFailure(error) && !policy.isClosed(),
    deadline: performance.now() + policy.retryMs - (Date.now() - started),
    signal,
    giveUp,
  });
}
