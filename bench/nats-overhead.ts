import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { InProcessBus } from '../src/bus/in-process-bus.js';
import { WorkerStoppedError } from '../src/errors.js';
import { submitAndFollow } from '../src/runtime/services.js';
import { harness } from './harness-overhead.js';
import { callsPerRun, InstantModel } from './instant-model.js';
import { type LoopFigures, loopFigures, median } from './measure.js';
import { MeteredModel } from './metered-model.js';
import {
  type BenchNatsServer,
  type Deployment,
  natsConnector,
  startBenchNatsCluster,
  startBenchNatsServer,
  startDeployment,
} from './nats-deployment.js';
import { type FloorResults, type FloorSettings, measureFloor } from './nats-floor.js';
import { type ServerTraffic, traffic } from './nats-monitor.js';

/**
 * Section 6: what the NATS bus costs per model call. The same sequential runs, with the instant
 * model of sections 1–2, on three set-ups: the embedded runtime through the public API (section
 * 1's code), the distributed services (coordinator service, one worker per role, persistence,
 * a client that submits and follows) on one in-process bus, and the same services on NATS with one
 * connection each. The model's own time is taken out, as in section 1. On NATS the server's
 * messages and bytes per model call are read from its monitoring endpoint, and the floor
 * (`nats-floor.ts`) is measured afterwards on the same server.
 */

/** Settings of the bus overhead section. */
export interface BusOverheadSettings {
  /** Root of the temporary logs and pid file. */
  dir: string;
  steps: number;
  warmupRuns: number;
  runs: number;
  /** Batches of `runs` per figure; the median is kept. */
  reps: number;
  /** Requests each role worker of the services set-ups handles at once. */
  workerConcurrency: number;
  /** The floor's round trips, measured on the NATS set-up's server once its services stopped. */
  floor: FloorSettings;
}

/** Figures of a set-up; on NATS also the server's CPU time and traffic per model call. */
export interface BusFigures extends LoopFigures {
  /** nats-server CPU time per model call, in µs (null in process, or when it cannot be read). */
  serverCpuUsPerCall: number | null;
  /** Messages and bytes through the nats-server per model call, in all and by connection (null in process). */
  traffic: ServerTraffic | null;
}

/** Results of the section, and NATS's net µs per call over each in-process set-up's. */
export interface BusOverheadResults {
  settings: Omit<BusOverheadSettings, 'dir'>;
  embedded: BusFigures;
  servicesInProcess: BusFigures;
  servicesNats: BusFigures;
  /**
   * The same services on a three-server JetStream cluster on loopback, streams and lease bucket
   * with 3 replicas, each connection given every server (server CPU: the three together).
   */
  servicesNatsCluster: BusFigures;
  /** Net µs per call on the cluster ÷ on one server. */
  clusterOverSingle: number;
  natsOverEmbedded: number;
  natsOverServicesInProcess: number;
  /** The bare work round trip and core request/reply on the NATS set-up's server. */
  floor: FloorResults;
}

const TASK = 'Write a three-part technical document (bus overhead benchmark)';

/** What a batch reads of the NATS side: CPU of every server, and one server's counters if it has them. */
type MeasuredServers = Pick<BenchNatsServer, 'cpuMs'> & { monitor?: BenchNatsServer['monitor'] };

/** Times sequential runs submitted to a deployment; the log is drained at the end of each batch. */
function deploymentBatch(
  deployment: Deployment,
  model: MeteredModel,
  settings: BusOverheadSettings,
  server: MeasuredServers | null,
) {
  return async (runs: number): Promise<BusFigures> => {
    model.reset();
    const counters = await server?.monitor?.snapshot();
    const serverCpu = server?.cpuMs() ?? null;
    const cpu = process.cpuUsage();
    const started = performance.now();
    let passed = 0;
    for (let i = 0; i < runs; i++) {
      const { closing } = await submitAndFollow(deployment.client, {
        task: TASK,
        options: { maxSteps: settings.steps },
      });
      const last = await closing;
      if (last.type === 'run.completed' && last.payload.passed) passed++;
    }
    // A run's log is written by another service: the batch ends when the last one is on disk.
    await deployment.persistenceBus.flush();
    const wallMs = performance.now() - started;
    const used = process.cpuUsage(cpu);
    const serverCpuAfter = server?.cpuMs() ?? null;
    const countersAfter = await server?.monitor?.snapshot();
    const expected = runs * callsPerRun(settings.steps);
    if (model.calls !== expected || passed !== runs) {
      throw new Error(
        `bus overhead: ${model.calls} model calls (expected ${expected}), ${passed}/${runs} passed`,
      );
    }
    const figures = loopFigures(
      { runs, concurrency: 1, calls: model.calls, modelMs: model.modelMs },
      { wallMs, cpuMs: (used.user + used.system) / 1000 },
    );
    const serverCpuUsPerCall =
      serverCpu === null || serverCpuAfter === null
        ? null
        : ((serverCpuAfter - serverCpu) * 1000) / model.calls;
    const batchTraffic = counters && countersAfter ? traffic(counters, countersAfter, model.calls) : null;
    return { ...figures, serverCpuUsPerCall, traffic: batchTraffic };
  };
}

/** Runs the warm-up and the batches of one services set-up, then stops it. */
async function measureServices(
  settings: BusOverheadSettings,
  deployment: Deployment,
  model: MeteredModel,
  errors: string[],
  server: MeasuredServers | null,
): Promise<BusFigures> {
  let figures: BusFigures;
  try {
    const batch = deploymentBatch(deployment, model, settings, server);
    await batch(settings.warmupRuns);
    figures = await median(settings.reps, () => batch(settings.runs));
  } finally {
    await deployment.stop();
  }
  if (errors.length > 0) throw new Error(`bus overhead: ${errors.join('; ')}`);
  return figures;
}

/** The services' settings shared by both buses. */
function servicesOptions(settings: BusOverheadSettings, model: MeteredModel, workingDirectory: string) {
  mkdirSync(workingDirectory, { recursive: true });
  return {
    workersPerRole: 1,
    concurrency: settings.workerConcurrency,
    model: () => model,
    workingDirectory,
    maxSteps: settings.steps,
    maxRetriesPerStep: 3,
  };
}

/** Measures the three set-ups in turn. */
export async function measureBusOverhead(settings: BusOverheadSettings): Promise<BusOverheadResults> {
  const { dir, ...rest } = settings;
  const sectionOne = { ...rest, dir, concurrency: 1 };
  const embedded = harness(sectionOne, 'bus-overhead-embedded', true);
  let embeddedFigures: LoopFigures;
  try {
    await embedded.batch(settings.warmupRuns, 1);
    embeddedFigures = await median(settings.reps, () => embedded.batch(settings.runs, 1));
  } finally {
    await embedded.pge.close();
  }

  const localErrors: string[] = [];
  const local = new InProcessBus({
    onHandlerError: (error, subject) => {
      if (!(error instanceof WorkerStoppedError)) localErrors.push(`${subject}: ${String(error)}`);
    },
  });
  const localModel = new MeteredModel(new InstantModel(settings.steps));
  const localDeployment = await startDeployment({
    ...servicesOptions(settings, localModel, join(dir, 'bus-overhead-in-process')),
    connect: async () => local,
    durablePersistence: false,
    errors: localErrors,
  });
  const servicesInProcess = await measureServices(settings, localDeployment, localModel, localErrors, null);

  const natsDir = join(dir, 'bus-overhead-nats');
  const natsModel = new MeteredModel(new InstantModel(settings.steps));
  const natsErrors: string[] = [];
  const opts = servicesOptions(settings, natsModel, natsDir);
  const server = await startBenchNatsServer(join(natsDir, 'nats-server.pid'));
  let servicesNats: BusFigures;
  let floor: FloorResults;
  try {
    const natsDeployment = await startDeployment({
      ...opts,
      connect: natsConnector(server.url, natsErrors),
      durablePersistence: true,
      errors: natsErrors,
    });
    servicesNats = await measureServices(settings, natsDeployment, natsModel, natsErrors, server);
    floor = await measureFloor(server, settings.floor);
  } finally {
    await server.stop();
  }

  const clusterDir = join(dir, 'bus-overhead-nats-cluster');
  const clusterModel = new MeteredModel(new InstantModel(settings.steps));
  const clusterErrors: string[] = [];
  const clusterOpts = servicesOptions(settings, clusterModel, clusterDir);
  const cluster = await startBenchNatsCluster(clusterDir);
  let servicesNatsCluster: BusFigures;
  try {
    const clusterDeployment = await startDeployment({
      ...clusterOpts,
      connect: natsConnector(cluster.urls, clusterErrors, 3),
      durablePersistence: true,
      errors: clusterErrors,
    });
    servicesNatsCluster = await measureServices(
      settings,
      clusterDeployment,
      clusterModel,
      clusterErrors,
      cluster,
    );
  } finally {
    await cluster.stop();
  }
  return {
    settings: rest,
    embedded: { ...embeddedFigures, serverCpuUsPerCall: null, traffic: null },
    servicesInProcess,
    servicesNats,
    servicesNatsCluster,
    clusterOverSingle: servicesNatsCluster.usPerCall / servicesNats.usPerCall,
    natsOverEmbedded: servicesNats.usPerCall / embeddedFigures.usPerCall,
    natsOverServicesInProcess: servicesNats.usPerCall / servicesInProcess.usPerCall,
    floor,
  };
}
