import { createConnection, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP relay on loopback to one port: it carries one server's route to another server of a test
 * cluster, so that a test can cut the network between them (a partition) while both servers run and
 * keep their clients, or a client's connection to a server, with what the server sends rewritten.
 * `cut` resets the connections it carries and refuses new ones until `mend`.
 */
export interface TcpRelay {
  readonly port: number;
  cut(): void;
  mend(): void;
  close(): Promise<void>;
}

export interface TcpRelayOptions {
  /**
   * Makes, for each connection, the function the target's bytes go through on their way back (a
   * connection whose rewrite throws is closed); without it they pass unchanged.
   */
  rewriteReplies?: () => (chunk: Buffer) => Buffer;
}

export async function startTcpRelay(targetPort: number, options: TcpRelayOptions = {}): Promise<TcpRelay> {
  const open = new Set<Socket>();
  let cut = false;
  const server: Server = createServer((inbound) => {
    if (cut) {
      inbound.resetAndDestroy();
      return;
    }
    const outbound = createConnection({ host: '127.0.0.1', port: targetPort });
    const rewrite = options.rewriteReplies?.();
    for (const [from, to, through] of [
      [inbound, outbound, undefined],
      [outbound, inbound, rewrite],
    ] as const) {
      open.add(from);
      if (through === undefined) from.pipe(to);
      else
        from.on('data', (chunk: Buffer) => {
          try {
            to.write(through(chunk));
          } catch (error) {
            to.destroy(error as Error);
          }
        });
      from.on('error', () => to.destroy());
      from.on('close', () => {
        open.delete(from);
        to.destroy();
      });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('the relay has no port');
  return {
    port: address.port,
    cut() {
      cut = true;
      for (const socket of open) socket.resetAndDestroy();
    },
    mend() {
      cut = false;
    },
    close() {
      for (const socket of open) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
