import { randomUUID } from 'node:crypto';

/** A new run id: sortable by start time, safe in subjects and file names. */
export function newRunId(now = new Date()): string {
  const stamp = now.toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
  // The first 8 hex digits of a v4 UUID are random; `randomUUID` draws from a cached pool,
  // `randomBytes` asks the system for entropy on every call.
  return `pge-${stamp}-${randomUUID().slice(0, 8)}`;
}

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
