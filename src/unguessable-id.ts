import { randomUUID } from 'node:crypto';

/**
 * 16 random hex digits (64 bits), for the part of an id that an outsider must not predict (an
 * event's id is its `Nats-Msg-Id`, a request's id names the call a result answers). Drawn from
 * `randomUUID`'s cached pool, as `newRunId` is: the first 8 and the last 8 hex digits of a v4 UUID
 * are random (its version and variant digits lie between them).
 */
export function unguessableId(): string {
  const uuid = randomUUID();
  return uuid.slice(0, 8) + uuid.slice(28);
}
