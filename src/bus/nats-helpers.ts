import type { MsgHdrs, NatsConnection } from '@nats-io/transport-node';
import { errors as natsErrors, headers as natsHeaders } from '@nats-io/transport-node';
import { BusError } from '../errors.js';
import { type MessageHeaders, NO_HEADERS } from './bus.js';

/** Subject checks and the mapping of nats.js failures to pge errors, shared by the NATS bus modules. */

/** True when `error` or one of its causes is an instance of `type`. */
export function hasCause(error: unknown, type: abstract new (...args: never[]) => Error): boolean {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current instanceof Error; depth++) {
    if (current instanceof type) return true;
    current = (current as Error).cause;
  }
  return false;
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
