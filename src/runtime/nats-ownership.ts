import { readRunEvents, readRunResults } from '../bus/channels.js';
import type { NatsBus } from '../bus/nats-bus.js';
import type { RunLeases } from '../bus/run-leases.js';
import type { LostWork } from '../conductor/run-calls.js';
import type { RunEvent } from '../schemas/index.js';
import type { RunOwnership } from './services.js';
import { PRESENCE_TTL_MS, type WorkerDirectory } from './worker-presence.js';

const BY_CONSUMER = { consumer: true } as const;

/**
 * Run ownership as the NATS deployment shares it between coordinators: the leases of the KV
 * bucket (`RunLeases`) say who owns a run, `PGE_EVENTS` holds what a run recorded, and
 * `PGE_RESULTS` what its workers answered, so that a coordinator can take over the run of one
 * that died.
 */
export function natsRunOwnership(bus: NatsBus, leases: RunLeases): RunOwnership {
  return {
    owner: leases.owner,
    claim: (runId) => leases.claim(runId),
    release: (runId) => leases.release(runId),
    letExpire: (runId) => leases.letExpire(runId),
    takeOver: (runId) => leases.takeOver(runId),
    takeOverNow: (runId) => leases.takeOverNow(runId),
    // Only coordinators own runs, and they may make consumers: a run taken over is read in a few
    // round trips rather than one per event.
    events: async (runId) => bySeq(await readRunEvents(bus, runId, BY_CONSUMER)),
    storedResult: async (runId, requestId) =>
      (await readRunResults(bus, runId, BY_CONSUMER)).find((result) => result.requestId === requestId) ??
      null,
  };
}

/**
 * A run's events in seq order, each once: the stream keeps them in the order they were stored,
 * which a publish sent again after a reconnect can change, and may hold one twice past its
 * duplicate window.
 */
function bySeq(events: readonly RunEvent[]): RunEvent[] {
  const seen = new Map<number, RunEvent>();
  for (const event of events) if (!seen.has(event.seq)) seen.set(event.seq, event);
  return [...seen.values()].sort((a, b) => a.seq - b.seq);
}

/**
 * Lost work items as a NATS coordinator tells them: the role's durable consumer says whether its
 * queue is idle (`NatsBus.workIdle`), and the workers' presence which requests each holds
 * (`hearWorkers`, on the same clock as `now`). Such an item is one the server counts as delivered
 * and never delivers again (nats-server has had such defects across a leader change).
 */
export function natsLostWork(
  bus: NatsBus,
  workers: WorkerDirectory,
  onSentAgain: LostWork['onSentAgain'],
  now: () => number = Date.now,
): LostWork {
  return {
    idleAt: async (role) => ((await bus.workIdle(role)) ? now() : null),
    heldSince: (role, requestId, since) => workers.heldSince(role, requestId, since),
    confirmMs: PRESENCE_TTL_MS,
    ...(onSentAgain === undefined ? {} : { onSentAgain }),
  };
}
