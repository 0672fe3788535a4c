import { randomUUID } from 'node:crypto';

/** A new run id: sortable by start time, safe in subjects and file names. */
export function newRunId(now = new Date()): string {
  const stamp = now.toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
  // The first 8 hex digits of a v4 UUID are random; `randomUUID` draws from a cached pool,
  // `randomBytes` asks the system for entropy on every call.
  return `pge-${stamp}-${randomUUID().slice(0, 8)}`;
}
