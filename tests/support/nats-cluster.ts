import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { type ConnectionOptions, connect } from '@nats-io/transport-node';
import type { NatsRole } from '../../src/bus/permissions.js';
import { clusterServerName, writeNatsConfig } from '../../src/runtime/nats-config.js';
import {
  connectOptionsAs,
  freePort,
  mintAdminCreds,
  type NatsServerHandle,
  refusalsIn,
  startNatsServer,
} from './nats-server.js';

/**
 * A private JetStream cluster for tests: `size` nats-servers on loopback, started from the files
 * `pge nats-config --cluster` writes (operator mode, one credential per role, authenticated routes),
 * each on free ports with its own store, and ready once every server takes part in JetStream.
 */
export interface SecuredNatsCluster {
  /** The servers, in the order of their names (`pge-1`, `pge-2`, …). */
  readonly servers: readonly NatsServerHandle[];
  /** Every server's URL, comma-separated, as NATS_URL takes them. */
  readonly urls: string;
  /** The environment of a `pge` process of `role` on every server of the cluster, or on `only`. */
  env(role: NatsRole, only?: NatsServerHandle): Record<string, string>;
  /** nats.js options as `role` (or the test's admin) on every server. */
  connectOptions(role: NatsRole | 'admin'): ConnectionOptions;
  /** The server named `name` (`pge-2`, as JetStream names a stream's leader). */
  named(name: string): NatsServerHandle;
  /** Permission violations in every server's log (`SecuredNatsServer.refusals`). */
  refusals(): string[];
  /** Stops every server and deletes the configs and stores. */
  stop(): Promise<void>;
}

export async function startSecuredNatsCluster(size = 3): Promise<SecuredNatsCluster> {
  const configDir = await mkdtemp(join(tmpdir(), 'pge-nats-cluster-'));
  const cluster = [];
  // The client port is the one startNatsServer picks (-p); the routes' ports are fixed here.
  for (let i = 0; i < size; i++) {
    cluster.push({ host: '127.0.0.1', port: 0, clusterPort: await freePort(), monitorPort: 0 });
  }
  const files = await writeNatsConfig({
    dir: configDir,
    host: '127.0.0.1',
    storeDir: join(configDir, 'jetstream'),
    cluster,
  });
  const adminCreds = await mintAdminCreds(configDir);
  const servers = await Promise.all(files.configFiles.map((configFile) => startNatsServer({ configFile })));
  const urls = servers.map((server) => server.url).join(',');
  const credsOf = (role: NatsRole | 'admin') => (role === 'admin' ? adminCreds : files.creds[role]);
  const handle: SecuredNatsCluster = {
    servers,
    urls,
    env: (role, only) => ({ NATS_URL: only?.url ?? urls, NATS_CREDS: files.creds[role] }),
    // nats.js takes a list (NATS_URL's commas are pge's reading of the variable).
    connectOptions: (role) => connectOptionsAs(urls.split(','), role, credsOf(role)),
    named: (name) => {
      const index = servers.findIndex((_, i) => clusterServerName(i + 1) === name);
      if (index < 0) throw new Error(`no server named ${name} in the cluster`);
      return servers[index]!;
    },
    refusals: () => servers.flatMap((server) => refusalsIn(server.log())),
    async stop() {
      await Promise.all(servers.map((server) => server.stop()));
      await rm(configDir, { recursive: true, force: true });
    },
  };
  try {
    await untilJetStreamReady(handle.connectOptions('admin'), size);
  } catch (error) {
    await handle.stop();
    throw error;
  }
  return handle;
}

/**
 * Waits until JetStream answers and every one of the `size` servers takes part in it: a stream
 * with `size` replicas can then be placed (one is made and deleted to find out).
 */
export async function untilJetStreamReady(
  options: ConnectionOptions,
  size: number,
  timeoutMs = 30_000,
): Promise<void> {
  const nc = await connect(options);
  try {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        const jsm = await jetstreamManager(nc, { timeout: 2_000 });
        await jsm.streams.add({ name: 'CLUSTER_READY', subjects: ['cluster.ready'], num_replicas: size });
        await jsm.streams.delete('CLUSTER_READY');
        return;
      } catch (error) {
        if (Date.now() > deadline) throw new Error(`the JetStream cluster did not come up: ${String(error)}`);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
  } finally {
    await nc.close();
  }
}
