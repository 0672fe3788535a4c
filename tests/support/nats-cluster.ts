import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
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
import { startTcpRelay, type TcpRelay } from './tcp-relay.js';

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
  /**
   * Cuts `server` off from the others (a network partition: it runs on, and keeps its clients),
   * until `heal`; only for a cluster started `partitionable`.
   */
  partition(server: NatsServerHandle): void;
  heal(): void;
  /** Permission violations in every server's log (`SecuredNatsServer.refusals`). */
  refusals(): string[];
  /** Stops every server and deletes the configs and stores. */
  stop(): Promise<void>;
}

export async function startSecuredNatsCluster(
  size = 3,
  { partitionable = false }: { partitionable?: boolean } = {},
): Promise<SecuredNatsCluster> {
  const deadline = Date.now() + CLUSTER_READY_MS;
  // A route port is only found free: another test file's server may take it before this cluster's
  // server binds it, which then exits. Only then is the cluster started again, on other ports.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startClusterOnce(size, partitionable, deadline);
    } catch (error) {
      if (!(error instanceof PortTakenError) || attempt === PORT_TAKEN_ATTEMPTS) throw error;
      console.warn(`the test cluster is started again on other ports: ${error.message}`);
    }
  }
}

/** How long a cluster may take to come up, every server taking part in JetStream. */
const CLUSTER_READY_MS = 60_000;
/** How many times a cluster is started when a port it was to use is taken. */
const PORT_TAKEN_ATTEMPTS = 3;
/** What a hook that starts a cluster needs: the cluster's time, and its servers' stop on failure. */
export const CLUSTER_START_MS = CLUSTER_READY_MS + 20_000;

/** A server of the cluster exited because a port it was to listen on was taken. */
class PortTakenError extends Error {}

/** `error` as a PortTakenError when `log` (the server's) says a port was taken. */
function portTakenOr(error: unknown, log: string): unknown {
  const taken = /.*address already in use.*/.exec(log);
  return taken === null ? error : new PortTakenError(taken[0], { cause: error });
}

async function startClusterOnce(
  size: number,
  partitionable: boolean,
  deadline: number,
): Promise<SecuredNatsCluster> {
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
  const relays = partitionable ? await relayRoutes(files.configFiles, cluster) : [];
  const started = await Promise.allSettled(
    files.configFiles.map((configFile) => startNatsServer({ configFile })),
  );
  const servers = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  /** The end of the log of the cluster's server `i`, under its name. */
  const logTail = (i: number) => `--- ${clusterServerName(i + 1)}\n${servers[i]!.log().slice(-2048)}`;
  const stop = async () => {
    await Promise.all(servers.map((server) => server.stop()));
    await Promise.all(relays.map((relay) => relay.close()));
    await rm(configDir, { recursive: true, force: true });
  };
  const failed = started.find((result) => result.status === 'rejected');
  if (failed !== undefined) {
    await stop();
    throw portTakenOr(failed.reason, String(failed.reason));
  }
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
    partition(server) {
      if (!partitionable) throw new Error('the cluster was not started partitionable');
      const index = servers.indexOf(server);
      if (index < 0) throw new Error('the server to cut off is not one of the cluster');
      for (const relay of relays) if (relay.from === index || relay.to === index) relay.cut();
    },
    heal: () => {
      for (const relay of relays) relay.mend();
    },
    refusals: () => servers.flatMap((server) => refusalsIn(server.log())),
    stop,
  };
  try {
    const check = () => {
      const exited = servers.findIndex((server) => !server.running());
      if (exited < 0) return;
      throw portTakenOr(new Error(`a server exited:\n${logTail(exited)}`), servers[exited]!.log());
    };
    await untilJetStreamReady(handle.connectOptions('admin'), size, { deadline, check });
  } catch (error) {
    await stop();
    if (error instanceof PortTakenError) throw error;
    const logs = servers.map((_, i) => logTail(i));
    throw new Error(`${String(error)}\n${logs.join('\n')}`, { cause: error });
  }
  return handle;
}

/**
 * Puts a relay on every route, each way (server `from`'s route to server `to`), by rewriting the
 * written configs: the routes name the relays' ports, and each server advertises a route port that
 * takes no connection, through which the others would otherwise connect around the relays.
 */
async function relayRoutes(
  configFiles: readonly string[],
  cluster: readonly { clusterPort: number }[],
): Promise<(TcpRelay & { from: number; to: number })[]> {
  const relays = [];
  for (const [from, configFile] of configFiles.entries()) {
    let config = await readFile(configFile, 'utf8');
    for (const [to, { clusterPort }] of cluster.entries()) {
      if (to === from) continue;
      const relay = { ...(await relayTo(clusterPort, cluster)), from, to };
      relays.push(relay);
      config = replaceOnce(config, `@127.0.0.1:${clusterPort}"`, `@127.0.0.1:${relay.port}"`);
    }
    // Port 1 takes no connection: a route a server learns of from another (and would make itself)
    // fails, so only the relayed routes exist.
    await writeFile(
      configFile,
      replaceOnce(config, 'cluster {\n', 'cluster {\n  advertise: "127.0.0.1:1"\n'),
    );
  }
  return relays;
}

/**
 * A relay to `clusterPort` on a port no server of `cluster` is to listen on: the route ports were
 * only found free, not held, so the system may hand one of them to a relay.
 */
async function relayTo(clusterPort: number, cluster: readonly { clusterPort: number }[]): Promise<TcpRelay> {
  for (;;) {
    const relay = await startTcpRelay(clusterPort);
    if (!cluster.some((server) => server.clusterPort === relay.port)) return relay;
    await relay.close();
  }
}

/** `text` with `from` replaced by `to`; throws when `from` is not in it (the config's format changed). */
function replaceOnce(text: string, from: string, to: string): string {
  if (!text.includes(from)) throw new Error(`the written nats-server config has no ${JSON.stringify(from)}`);
  return text.replace(from, to);
}

/**
 * Waits until JetStream answers and every one of the `size` servers takes part in it (a stream with
 * `size` replicas can then be placed: one is made and deleted to find out), until `deadline` (30 s
 * from now by default); `check` throws to give up sooner (a server exited).
 */
export async function untilJetStreamReady(
  options: ConnectionOptions,
  size: number,
  { deadline = Date.now() + 30_000, check = () => {} }: { deadline?: number; check?: () => void } = {},
): Promise<void> {
  const nc = await connect(options);
  try {
    for (;;) {
      check();
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
