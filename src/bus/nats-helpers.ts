import { JetStreamError } from '@nats-io/jetstream';
import type { MsgHdrs, NatsConnection } from '@nats-io/transport-node';
import { errors as natsErrors, headers as natsHeaders } from '@nats-io/transport-node';
import { BusError } from '../errors.js';
import { type MessageHeaders, NO_HEADERS } from './bus.js';

/** Subject checks and the mapping of nats.js failures to pge errors, shared by the NATS bus modules. */

/** True when `error` or one of its causes is an instance of `type`. */
export function hasCause(error: unknown, type: abstract new (...args: never[]) => Error): boolean {
  return causeOf(error, type) !== null;
}

/** `error` or the first of its causes that is an instance of `type`, else null. */
export function causeOf<T extends Error>(
  error: unknown,
  type: abstract new (...args: never[]) => T,
): T | null {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current instanceof Error; depth++) {
    if (current instanceof type) return current;
    current = (current as Error).cause;
  }
  return null;
}

/** `promise`, or a `BusError` once `ms` passed without it settling. */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new BusError(`${what} timed out after ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** `error` as a `BusError` saying `what` failed; a closed or draining connection is named as such. */
export function busError(error: unknown, what: string): BusError {
  if (error instanceof BusError) return error;
  const closed =
    hasCause(error, natsErrors.ClosedConnectionError) || hasCause(error, natsErrors.DrainingConnectionError);
  const reason = closed ? 'the connection is closed' : error instanceof Error ? error.message : String(error);
  return new BusError(`${what}: ${reason}`, { cause: error });
}

/**
 * True for "no responders" to a JetStream request or publish: nothing answered it on the server the
 * connection is on (a `NoRespondersError` in its causes, as nats.js's `JetStreamNotEnabled` has, or
 * a pull's 503 status), or that server said JetStream is not enabled for the account (also a
 * `JetStreamNotEnabled`, which nats.js's public entry does not export).
 */
export function isNoResponders(error: unknown): boolean {
  if (hasCause(error, natsErrors.NoRespondersError)) return true;
  if (!(error instanceof Error)) return false;
  return (
    error.name === 'JetStreamNotEnabled' ||
    (error.name === 'JetStreamStatusError' && (error as Error & { code?: number }).code === 503)
  );
}

/** True for a pull nothing served: "no responders", or no heartbeat from the consumer. */
export function isUnservedPull(error: unknown): boolean {
  return isNoResponders(error) || (error instanceof JetStreamError && error.message === 'heartbeats missed');
}

/**
 * How long the server a process is on may leave its JetStream publishes or pulls unserved before
 * the process moves to another server of the cluster: longer than a stream's leader election (about
 * 5 s), during which the whole cluster may leave them so.
 */
export const UNSERVED_MOVE_MS = 10_000;
/** The wait before a move doubles with each move not followed by a served request, up to 2^5 times. */
const MAX_DOUBLINGS = 5;

/**
 * Moves a connection to another server of its cluster when the one it is on keeps leaving its
 * JetStream publishes or pulls unserved. After a pause or a partition a nats-server can go on
 * answering "no responders" for minutes while the other servers of its cluster serve the same
 * streams (pge's tests saw it with nats-server 2.9; nats-io/nats-server#5738 reports the like), and
 * nats.js changes servers only when a connection breaks: so it is broken here (`reconnect`).
 *
 * A move comes once requests have gone unserved for `afterMs`, counted from the last reconnect at
 * the earliest, so that a server is judged on its own answers. Each move not followed by a served
 * request doubles that wait: a cluster that serves nothing (a stream removed) is not redialled every
 * few seconds for ever. Not on a lone server, where there is nowhere to go.
 */
export class ServerMove {
  #reconnectedAt = Number.NEGATIVE_INFINITY;
  #moves = 0;
  #moving = false;

  constructor(
    private readonly nc: NatsConnection,
    private readonly reconnects: Reconnects,
    /** The servers the connection was given: more than one is somewhere to go, whatever the server lists. */
    private readonly given: number,
    private readonly report: (error: BusError) => void,
    private readonly afterMs = UNSERVED_MOVE_MS,
  ) {
    reconnects.listen(() => {
      this.#reconnectedAt = Date.now();
    });
  }

  /** A publish or a pull was served. */
  served(): void {
    this.#moves = 0;
  }

  /** Told by a loop that retries a JetStream publish or pull, with when its `what` began to go unserved. */
  unserved(since: number, what: 'publishes' | 'pulls'): void {
    const now = Date.now();
    const unservedFor = now - Math.max(since, this.#reconnectedAt);
    if (this.#moving || unservedFor < this.afterMs * 2 ** Math.min(this.#moves, MAX_DOUBLINGS)) return;
    if (this.nc.isClosed() || this.nc.isDraining() || !this.#elsewhere()) return;
    this.#moves++;
    this.#moving = true;
    const server = this.nc.getServer();
    this.report(
      new BusError(
        `${server} has left JetStream ${what} unserved for ${Math.round(unservedFor / 1000)} s; moving to another server of its cluster`,
      ),
    );
    this.#moveFrom(server)
      .catch(() => undefined) // closed meanwhile: nothing to move
      .finally(() => {
        this.#moving = false;
      });
  }

  /** Whether there is another server to go to. A server lists its cluster's (itself included), but a cut-off one only itself. */
  #elsewhere(): boolean {
    return this.given > 1 || (this.nc.info?.connect_urls?.length ?? 0) > 1;
  }

  /**
   * Reconnects until on another server. nats.js's first reconnect goes back to the server it first
   * connected to: its first choice of a server does not turn its list.
   */
  async #moveFrom(server: string): Promise<void> {
    for (let attempt = 0; attempt < 2 && this.nc.getServer() === server; attempt++) {
      let stop = () => {};
      let timer: NodeJS.Timeout | undefined;
      // Not for ever: a connection already down when asked is not broken again, and the reconnect
      // it is waiting for may take long; the next unserved request then asks again.
      const reconnected = new Promise<void>((resolve) => {
        stop = this.reconnects.listen(resolve);
        timer = setTimeout(resolve, this.afterMs);
      });
      try {
        await this.nc.reconnect();
        await reconnected;
      } finally {
        stop();
        clearTimeout(timer);
      }
    }
  }
}

/**
 * The reconnects of a connection, told to listeners. nats.js drops what was buffered while
 * disconnected when it reconnects, and a reply to a request sent before is lost with the old
 * connection: whatever waits for one should ask again then, rather than wait for its timeout.
 */
export class Reconnects {
  readonly #listeners = new Set<() => void>();
  readonly #disconnects = new Set<() => void>();

  constructor(nc: NatsConnection) {
    // Not floating: the loop ends when the connection closes; a failing status stream only leaves
    // waiters to their timeouts, as without this class.
    (async () => {
      for await (const status of nc.status()) {
        const listeners = { reconnect: this.#listeners, disconnect: this.#disconnects }[
          status.type as string
        ];
        for (const listener of [...(listeners ?? [])]) listener();
      }
    })().catch(() => undefined);
  }

  /** Calls `listener` at every reconnect until the returned function is called. */
  listen(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => void this.#listeners.delete(listener);
  }

  /**
   * Calls `listener` at every loss of the connection until the returned function is called: told
   * as the socket closes, well before the connection is back (a reconnect takes at least a round
   * trip), whereas the reconnect's own status may come after the first messages of the new one.
   */
  listenDisconnect(listener: () => void): () => void {
    this.#disconnects.add(listener);
    return () => void this.#disconnects.delete(listener);
  }
}

/**
 * The failures of a reading that keeps retrying, told once per outage that lasts `afterMs`: not
 * once per attempt, nor for JetStream's few seconds of recovery after a restart, so that a
 * follower's output stays readable.
 */
export class OutageReport {
  private since: number | null = null;
  private reported = false;

  constructor(
    private readonly report: (error: unknown) => void,
    private readonly afterMs = 5_000,
  ) {}

  /** Whether the last attempt failed. */
  get ongoing(): boolean {
    return this.since !== null;
  }

  failed(error: unknown): void {
    this.since ??= Date.now();
    if (!this.reported && Date.now() - this.since >= this.afterMs) {
      this.report(error);
      this.reported = true;
    }
  }

  ended(): void {
    this.since = null;
    this.reported = false;
  }
}

/** `headers` (checked by `sealHeaders`) as NATS headers; none when there are none. */
export function toNatsHeaders(headers: MessageHeaders): MsgHdrs | undefined {
  const names = Object.keys(headers);
  if (names.length === 0) return undefined;
  const out = natsHeaders();
  for (const name of names) out.set(name, headers[name]!);
  return out;
}

/** The headers of a received NATS message (the last value of each), frozen. */
export function fromNatsHeaders(headers: MsgHdrs | undefined): MessageHeaders {
  if (headers === undefined) return NO_HEADERS;
  return Object.freeze(Object.fromEntries(headers.keys().map((name) => [name, headers.last(name)])));
}
