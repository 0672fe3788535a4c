import { startTcpRelay } from './tcp-relay.js';

/**
 * A NATS client's TCP proxy to one nats-server (a `TcpRelay`) that makes the server's PubAcks look like
 * nats-server 2.10's for a copy of a message still being stored: the first `times` acknowledgements
 * of a duplicate are passed on with `seq: 0`, every other byte unchanged. With this, the 2.9 server
 * of the tests shows what a client does with such an acknowledgement (ask again).
 *
 * It reads the server's side of the protocol (`MSG` and `HMSG` frames by their byte counts, every
 * other line as it comes) and writes each frame again with its new count.
 */
export interface PendingDuplicateProxy {
  /** `nats://127.0.0.1:<port>`: connect a client here. */
  readonly url: string;
  /** How many acknowledgements were passed on with seq 0 so far. */
  rewritten(): number;
  close(): Promise<void>;
}

export async function startPendingDuplicateProxy(
  serverPort: number,
  { times }: { times: number },
): Promise<PendingDuplicateProxy> {
  let rewritten = 0;
  const asPending = (payload: Buffer): Buffer => {
    if (rewritten >= times) return payload;
    let ack: unknown;
    try {
      ack = JSON.parse(payload.toString('utf8'));
    } catch {
      return payload;
    }
    const { duplicate, seq } = (ack ?? {}) as { duplicate?: unknown; seq?: unknown };
    if (duplicate !== true || typeof seq !== 'number' || seq === 0) return payload;
    rewritten++;
    return Buffer.from(JSON.stringify({ ...(ack as object), seq: 0 }));
  };
  const relay = await startTcpRelay(serverPort, {
    rewriteReplies: () => {
      const frames = new FrameReader(asPending);
      return (chunk) => frames.push(chunk);
    },
  });
  return {
    url: `nats://127.0.0.1:${relay.port}`,
    rewritten: () => rewritten,
    close: () => relay.close(),
  };
}

const CRLF = Buffer.from('\r\n');

/** The server's side of the protocol, frame by frame, with each message's payload passed through `rewrite`. */
class FrameReader {
  private pending = Buffer.alloc(0);

  constructor(private readonly rewrite: (payload: Buffer) => Buffer) {}

  /** Takes the next bytes from the server; returns every whole frame in them, rewritten. */
  push(chunk: Buffer): Buffer {
    this.pending = Buffer.concat([this.pending, chunk]);
    const out: Buffer[] = [];
    for (;;) {
      const lineEnd = this.pending.indexOf(CRLF);
      if (lineEnd < 0) break;
      const line = this.pending.subarray(0, lineEnd).toString('latin1');
      const fields = line.split(' ');
      const op = fields[0]?.toUpperCase();
      if (op !== 'MSG' && op !== 'HMSG') {
        out.push(this.pending.subarray(0, lineEnd + 2));
        this.pending = this.pending.subarray(lineEnd + 2);
        continue;
      }
      // MSG <subject> <sid> [reply] <total>; HMSG <subject> <sid> [reply] <headers> <total>.
      const total = Number(fields.at(-1));
      const headerBytes = op === 'HMSG' ? Number(fields.at(-2)) : 0;
      if (!Number.isInteger(total) || !Number.isInteger(headerBytes)) {
        throw new Error(`the proxy cannot read the server's frame ${JSON.stringify(line)}`);
      }
      const frameEnd = lineEnd + 2 + total + 2;
      if (this.pending.length < frameEnd) break;
      const body = this.pending.subarray(lineEnd + 2, lineEnd + 2 + total);
      const headers = body.subarray(0, headerBytes);
      const payload = this.rewrite(body.subarray(headerBytes));
      const counts = op === 'HMSG' ? [headerBytes, headerBytes + payload.length] : [payload.length];
      const head = [...fields.slice(0, op === 'HMSG' ? -2 : -1), ...counts].join(' ');
      out.push(Buffer.from(`${head}\r\n`, 'latin1'), headers, payload, CRLF);
      this.pending = this.pending.subarray(frameEnd);
    }
    return Buffer.concat(out);
  }
}
