/**
 * The message counters of a nats-server's monitoring endpoint (`-m <port>`): `/varz` for the whole
 * server, `/connz` for each client connection. A figure is a difference of two readings taken around
 * a timed batch, divided by the batch's model calls (or round trips), so it counts everything that
 * crossed the server meanwhile: requests, acknowledgements, pulls, deliveries, heartbeats.
 */

/** Messages and bytes a server (or one connection) took in and sent out. */
export interface MessageCounters {
  inMsgs: number;
  outMsgs: number;
  inBytes: number;
  outBytes: number;
}

/** The counters per model call (or per round trip). */
export type CountersPerCall = MessageCounters;

/** Counters of each client connection, by the name it connected with. */
export type ConnectionCounters = Record<string, MessageCounters>;

/** The monitoring figures of a server over a batch, per model call. */
export interface ServerTraffic {
  /** Whole server (`/varz`). */
  perCall: CountersPerCall;
  /** Each named connection (`/connz`), e.g. `pge-bench-coordinator`; unnamed ones as `cid <n>`. */
  byConnection: ConnectionCounters;
}

/** Reads the monitoring endpoint at `url` (`http://127.0.0.1:<port>`). */
export class ServerMonitor {
  constructor(readonly url: string) {}

  /** The server's totals since it started. */
  async varz(): Promise<MessageCounters> {
    return countersOf(await this.get<RawCounters>('/varz'));
  }

  /** Each open client connection's totals since it connected. */
  async connz(): Promise<ConnectionCounters> {
    const body = await this.get<{ connections?: (RawCounters & { cid: number; name?: string })[] }>(
      '/connz?limit=4096',
    );
    const out: ConnectionCounters = {};
    for (const connection of body.connections ?? []) {
      out[connection.name || `cid ${connection.cid}`] = countersOf(connection);
    }
    return out;
  }

  /** Both readings at once: what `traffic` takes the difference of. */
  async snapshot(): Promise<{ server: MessageCounters; connections: ConnectionCounters }> {
    const [server, connections] = await Promise.all([this.varz(), this.connz()]);
    return { server, connections };
  }

  private async get<T>(path: string): Promise<T> {
    const response = await fetch(`${this.url}${path}`);
    if (!response.ok) throw new Error(`nats-server monitoring ${path}: HTTP ${response.status}`);
    return (await response.json()) as T;
  }
}

interface RawCounters {
  in_msgs: number;
  out_msgs: number;
  in_bytes: number;
  out_bytes: number;
}

function countersOf(raw: RawCounters): MessageCounters {
  return { inMsgs: raw.in_msgs, outMsgs: raw.out_msgs, inBytes: raw.in_bytes, outBytes: raw.out_bytes };
}

/** `(after − before) ÷ count`, field by field. */
export function perUnit(before: MessageCounters, after: MessageCounters, count: number): MessageCounters {
  return {
    inMsgs: (after.inMsgs - before.inMsgs) / count,
    outMsgs: (after.outMsgs - before.outMsgs) / count,
    inBytes: (after.inBytes - before.inBytes) / count,
    outBytes: (after.outBytes - before.outBytes) / count,
  };
}

/** The traffic between two snapshots, per `count` calls; connections present in both only. */
export function traffic(
  before: { server: MessageCounters; connections: ConnectionCounters },
  after: { server: MessageCounters; connections: ConnectionCounters },
  count: number,
): ServerTraffic {
  const byConnection: ConnectionCounters = {};
  for (const [name, counters] of Object.entries(after.connections)) {
    const earlier = before.connections[name];
    if (earlier) byConnection[name] = perUnit(earlier, counters, count);
  }
  return { perCall: perUnit(before.server, after.server, count), byConnection };
}
