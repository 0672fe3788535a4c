import { createConnection, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP relay on loopback that carries one server's route to another server of a test cluster,
 * so that a test can cut the network between them (a partition) while both servers run and keep
 * their clients: `cut` resets the connections it carries and refuses new ones until `mend`.
 */
export interface RouteRelay {
  readonly port: number;
  cut(): void;
  mend(): void;
  close(): Promise<void>;
}

export async function startRouteRelay(targetPort: number): Promise<RouteRelay> {
  const open = new Set<Socket>();
  let cut = false;
  const server: Server = createServer((inbound) => {
    if (cut) {
      inbound.resetAndDestroy();
      return;
    }
    const outbound = createConnection({ host: '127.0.0.1', port: targetPort });
    for (const [from, to] of [
      [inbound, outbound],
      [outbound, inbound],
    ] as const) {
      open.add(from);
      from.pipe(to);
      from.on('error', () => to.destroy());
      from.on('close', () => {
        open.delete(from);
        to.destroy();
      });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('the route relay has no port');
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
