import { LRUCache } from 'lru-cache';
import type { Bus, BusSubscription } from '../bus/bus.js';
import { publishPresence, subscribePresence } from '../bus/channels.js';
import { PRESENCE_INTERVAL_MS } from '../bus/subjects.js';
import type { WorkerPresence } from '../schemas/control.js';
import type { Role } from '../schemas/index.js';

/**
 * Which role workers are there and which models serve them, as the workers say it themselves on
 * `pge.workers.<role>`: a coordinator does not hold the models of a distributed deployment, and
 * several workers of one role may run different ones. A worker says it every
 * `PRESENCE_INTERVAL_MS`; one not heard for three intervals is taken as gone.
 */

/** A worker not heard for this long is gone. */
export const PRESENCE_TTL_MS = 3 * PRESENCE_INTERVAL_MS;

/** What a role worker says of itself, but for the requests it holds. */
export type PresenceOf = Omit<WorkerPresence, 'ts' | 'holding'>;

/** Requests remembered as held by a worker lately: far more than a deployment's workers hold at once. */
const HELD_REQUESTS_KEPT = 100_000;

/**
 * Says, now and every `PRESENCE_INTERVAL_MS`, that a role worker is there; returns how to stop. A
 * presence that cannot be sent (a reconnect) is dropped: the next one says it again.
 */
export function announcePresence(
  bus: Bus,
  presence: PresenceOf,
  onError: (error: unknown) => void,
  holding?: () => string[],
): () => void {
  const say = () =>
    publishPresence(bus, {
      ...presence,
      ...(holding === undefined ? {} : { holding: holding() }),
      ts: new Date().toISOString(),
    }).catch((error: unknown) => onError(error));
  void say();
  const timer = setInterval(say, PRESENCE_INTERVAL_MS);
  timer.unref();
  return () => clearInterval(timer);
}

/** The workers a coordinator heard lately. */
export interface WorkerDirectory {
  /** The distinct models of the workers of `role` heard in the last `PRESENCE_TTL_MS`, sorted. */
  models(role: Role): string[];
  /** The workers heard lately whose client knows no price for their model. */
  unpriced(): WorkerPresence[];
  /**
   * Whether a worker of `role` said it held `requestId` at `since` (epoch ms) or after; null when
   * it cannot be told: no worker of the role is heard lately, or one does not say what it holds.
   */
  heldSince(role: Role, requestId: string, since: number): boolean | null;
  stop(): void;
}

/** Hears the role workers on `bus`; `now` is the clock (epoch ms) that ages what was heard. */
export function hearWorkers(bus: Bus, now: () => number = Date.now): WorkerDirectory {
  const heard = new Map<string, { presence: WorkerPresence; at: number }>();
  /** When a worker last said it held each request. */
  const held = new LRUCache<string, number>({ max: HELD_REQUESTS_KEPT });
  const subscription: BusSubscription = subscribePresence(bus, (presence) => {
    const at = now();
    heard.set(`${presence.role}/${presence.worker}`, { presence, at });
    for (const requestId of presence.holding ?? []) held.set(requestId, at);
  });
  const live = (): WorkerPresence[] => {
    const since = now() - PRESENCE_TTL_MS;
    for (const [key, { at }] of heard) if (at < since) heard.delete(key);
    return [...heard.values()].map(({ presence }) => presence);
  };
  return {
    models: (role) =>
      [
        ...new Set(
          live()
            .filter((p) => p.role === role)
            .map((p) => p.model),
        ),
      ].sort(),
    unpriced: () => live().filter((p) => !p.priced),
    heldSince: (role, requestId, since) => {
      const workers = live().filter((p) => p.role === role);
      if (workers.length === 0 || workers.some((p) => p.holding === undefined)) return null;
      return (held.get(requestId) ?? Number.NEGATIVE_INFINITY) >= since;
    },
    stop: () => subscription.unsubscribe(),
  };
}
