import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { resolveOptions } from '../src/api/options.js';
import type { Bus } from '../src/bus/bus.js';
import { NatsBus } from '../src/bus/nats-bus.js';
import { PERSISTENCE_CONSUMER } from '../src/bus/nats-streams.js';
import { WorkerStoppedError } from '../src/errors.js';
import { createPersistenceActor, type PersistenceActor } from '../src/persistence/persistence-actor.js';
import type { Model } from '../src/roles/model.js';
import { createRoleWorker, type RoleWorker } from '../src/roles/role-worker.js';
import { startCoordinatorService } from '../src/runtime/coordinator-service.js';
import { startNatsPersistence } from '../src/runtime/nats-persistence.js';
import type { CoordinatorService } from '../src/runtime/services.js';
import type { Role } from '../src/schemas/index.js';
import { untilJetStreamReady } from '../tests/support/nats-cluster.js';
import { freePort, type NatsServerHandle, startNatsServer } from '../tests/support/nats-server.js';
import { ServerMonitor } from './nats-monitor.js';

/**
 * The distributed deployment of the NATS sections, in this one process: a coordinator service, a
 * persistence actor, `workersPerRole` role workers per role and a client, each on its own bus (on
 * NATS, its own connection), wired as `pge worker --role …` wires them. Also a private nats-server
 * whose CPU time can be read, so that the server's share of the work is counted too.
 */

const ROLES: readonly Role[] = ['planner', 'generator', 'evaluator'];
/** How long `stop` waits by default for the persistence actor to have every event. */
const CATCH_UP_MS = 5_000;

/** A private nats-server (JetStream, loopback, fresh store), the CPU time it has used and its counters. */
export interface BenchNatsServer {
  readonly url: string;
  /** Its monitoring endpoint (`-m`): messages and bytes in and out, whole server and per connection. */
  readonly monitor: ServerMonitor;
  /** User + system CPU time of the server process so far (every thread), or null off Linux. */
  cpuMs(): number | null;
  stop(): Promise<void>;
}

let clockTicks: number | null = null;

/** `CLK_TCK`, the unit of the times in `/proc/<pid>/stat` (100 on every common Linux). */
function ticksPerSecond(): number {
  if (clockTicks === null) {
    try {
      clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      clockTicks = 100;
    }
  }
  return clockTicks;
}

/** CPU time of a process from `/proc/<pid>/stat` (utime + stime, fields 14 and 15), or null. */
export function processCpuMs(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces: count fields from the closing parenthesis.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[11]) + Number(fields[12]);
    return Number.isFinite(ticks) ? (ticks * 1000) / ticksPerSecond() : null;
  } catch {
    return null;
  }
}

const SCRIPT = join(import.meta.dirname, 'cli-process.ts');

/**
 * `pge worker --role coordinator --demo` from the sources (`bench/cli-process.ts`) on `url`, as
 * its own process: resolved once it says it is ready, rejected if it exits first.
 */
export function startCoordinatorProcess(url: string, id: string): Promise<ChildProcess> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', SCRIPT, 'worker', '--role', 'coordinator', '--demo', '--worker-id', id],
    {
      cwd: join(import.meta.dirname, '..'),
      env: { ...process.env, NATS_URL: url },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  return new Promise((resolve, reject) => {
    let err = '';
    child.stderr?.on('data', (d: Buffer) => {
      err += d.toString();
      if (err.includes('ready')) resolve(child);
    });
    child.on('exit', (code) => reject(new Error(`coordinator ${id} exited ${code}: ${err}`)));
  });
}

/**
 * Starts a private nats-server with `tests/support/nats-server.ts` (the one the integration tests
 * use), asking it to write its pid to `pidFile` so that its CPU time can be read, and to serve its
 * monitoring endpoint on a free loopback port.
 */
export async function startBenchNatsServer(pidFile: string): Promise<BenchNatsServer> {
  const monitorPort = await freePort();
  const server: NatsServerHandle = await startNatsServer({
    args: ['-P', pidFile, '-m', String(monitorPort)],
  });
  let pid: number | null = null;
  try {
    pid = Number(readFileSync(pidFile, 'utf8').trim()) || null;
  } catch {
    // No pid file: the server's CPU time is reported as unknown.
  }
  return {
    url: server.url,
    monitor: new ServerMonitor(`http://127.0.0.1:${monitorPort}`),
    cpuMs: () => (pid === null ? null : processCpuMs(pid)),
    stop: () => server.stop(),
  };
}

/** Options of `startDeployment`. */
export interface DeploymentOptions {
  /** Opens the bus of one service; called once per service (on NATS: one connection each). */
  connect: (name: string) => Promise<Bus>;
  /** True on NATS: the persistence actor reads a durable consumer, as in `pge worker --role persistence`. */
  durablePersistence: boolean;
  /** Role workers of each role: one count for every role, or a count per role. */
  workersPerRole: number | Readonly<Record<Role, number>>;
  /** Requests each worker handles at once. */
  concurrency: number;
  /** The model of the `index`-th worker of `role`. */
  model: (role: Role, index: number) => Model;
  /** Where the coordinator says logs go, and where the persistence actor writes them. */
  workingDirectory: string;
  /** Run settings of the coordinator (a submission may override them). */
  maxSteps: number;
  maxRetriesPerStep: number;
  /** Steps side by side (default: the option's default). */
  maxParallelSteps?: number;
  /** Where failures of the persistence actor are collected (pass the connector's list too). */
  errors: string[];
}

/** A running deployment. */
export interface Deployment {
  /** The client's bus: submit runs on it with `submitAndFollow`. */
  readonly client: Bus;
  readonly coordinator: CoordinatorService;
  /** The persistence actor's bus: `flush()` waits until every event so far is in a log. */
  readonly persistenceBus: Bus;
  /** Events not yet handed to the persistence actor (NATS: its consumer's pending count), or null. */
  persistenceBacklog(): Promise<number | null>;
  /**
   * Interrupts the runs still going, stops the workers (requests in flight are aborted), waits for
   * the persistence actor to catch up (at most `catchUpMs`, default 5 s, then it is reported),
   * closes every log and bus.
   */
  stop(catchUpMs?: number): Promise<void>;
}

/** Starts the services. Every bus is opened before anything subscribes, as separate processes would be. */
export async function startDeployment(options: DeploymentOptions): Promise<Deployment> {
  const { errors } = options;
  const buses: Bus[] = [];
  const open = async (name: string): Promise<Bus> => {
    const bus = await options.connect(name);
    if (!buses.includes(bus)) buses.push(bus);
    return bus;
  };
  const client = await open('client');
  const coordinatorBus = await open('coordinator');
  const persistenceBus = await open('persistence');
  const workerBuses: { role: Role; index: number; bus: Bus }[] = [];
  for (const role of ROLES) {
    const count =
      typeof options.workersPerRole === 'number' ? options.workersPerRole : options.workersPerRole[role];
    for (let index = 0; index < count; index++) {
      workerBuses.push({ role, index, bus: await open(`${role}-${index + 1}`) });
    }
  }

  const onError = (runId: string, error: Error) => errors.push(`log of ${runId}: ${error.message}`);
  const persistence: PersistenceActor =
    options.durablePersistence && persistenceBus instanceof NatsBus
      ? startNatsPersistence({ bus: persistenceBus, onError })
      : createPersistenceActor({ bus: persistenceBus, onError });
  const workers: RoleWorker[] = workerBuses.map(({ role, index, bus }) =>
    createRoleWorker({
      bus,
      role,
      model: options.model(role, index),
      concurrency: options.concurrency,
      workerId: `${role}-${index + 1}`,
    }),
  );
  // The workers own the models; the coordinator only reports a name in run.started.
  const name = 'bench model';
  const coordinator = startCoordinatorService({
    bus: coordinatorBus,
    options: resolveOptions({
      workingDirectory: options.workingDirectory,
      maxSteps: options.maxSteps,
      maxRetriesPerStep: options.maxRetriesPerStep,
      ...(options.maxParallelSteps === undefined ? {} : { maxParallelSteps: options.maxParallelSteps }),
    }),
    models: { planner: name, generator: name, evaluator: name },
  });
  // A subscription reaches the server some time after `subscribe` returns (and a durable consumer
  // is created asynchronously): until then a submission finds no responders.
  await Promise.all(buses.map((bus) => bus.flush()));

  return {
    client,
    coordinator,
    persistenceBus,
    async persistenceBacklog() {
      if (!(persistenceBus instanceof NatsBus)) return null;
      const jsm = await jetstreamManager(persistenceBus.connection);
      const info = await jsm.consumers.info('PGE_EVENTS', PERSISTENCE_CONSUMER);
      return info.num_pending + info.num_ack_pending;
    },
    async stop(catchUpMs = CATCH_UP_MS) {
      await coordinator.stop('interrupt');
      await Promise.all(workers.map((worker) => worker.stop('abort')));
      // Bounded: a persistence actor that cannot catch up is a failure to report, not a hang.
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<void>((resolve) => {
        timer = setTimeout(() => {
          errors.push(`the persistence actor did not catch up within ${catchUpMs} ms`);
          resolve();
        }, catchUpMs);
      });
      await Promise.race([persistenceBus.flush(), late]);
      clearTimeout(timer);
      await persistence.close();
      await Promise.all(buses.map((bus) => bus.close()));
    },
  };
}

/** Opens one NATS connection per service; failures are collected in `errors`, not printed. */
export function natsConnector(
  url: string,
  errors: string[],
  replicas?: number,
): (name: string) => Promise<Bus> {
  return (name) =>
    NatsBus.connect({
      servers: url,
      name: `pge-bench-${name}`,
      ...(replicas === undefined ? {} : { replicas }),
      onHandlerError: (error, subject) => {
        // Requests abandoned by `stop('abort')` at the end of a configuration are expected.
        if (!(error instanceof WorkerStoppedError)) errors.push(`${name} on ${subject}: ${String(error)}`);
      },
    });
}

/** A private JetStream cluster of open servers on loopback, for the cluster set-up of section 6. */
export interface BenchNatsCluster {
  /** Every server's URL, comma-separated. */
  readonly urls: string;
  /** User + system CPU time of all its servers so far, or null off Linux. */
  cpuMs(): number | null;
  stop(): Promise<void>;
}

/**
 * Starts `size` nats-servers (JetStream, no authorization) routed to each other, each with its pid
 * file in `dir`, and waits until every server takes part in JetStream (`untilJetStreamReady`).
 */
export async function startBenchNatsCluster(dir: string, size = 3): Promise<BenchNatsCluster> {
  const routes = await Promise.all(Array.from({ length: size }, () => freePort()));
  const servers: NatsServerHandle[] = [];
  const pids: (number | null)[] = [];
  for (const [i, port] of routes.entries()) {
    const pidFile = `${dir}/nats-server-${i + 1}.pid`;
    const others = routes.filter((other) => other !== port).map((other) => `nats://127.0.0.1:${other}`);
    servers.push(
      await startNatsServer({
        args: [
          ...['--name', `pge-${i + 1}`, '--cluster_name', 'pge', '--cluster', `nats://127.0.0.1:${port}`],
          ...['--routes', others.join(','), '-P', pidFile],
        ],
      }),
    );
    pids.push(Number(readFileSync(pidFile, 'utf8').trim()) || null);
  }
  const urls = servers.map((server) => server.url).join(',');
  await untilJetStreamReady({ servers: urls.split(',') }, size);
  return {
    urls,
    cpuMs() {
      const each = pids.map((pid) => (pid === null ? null : processCpuMs(pid)));
      return each.some((ms) => ms === null) ? null : each.reduce<number>((sum, ms) => sum + ms!, 0);
    },
    stop: async () => {
      await Promise.all(servers.map((server) => server.stop()));
    },
  };
}
