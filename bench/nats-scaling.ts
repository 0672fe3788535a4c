import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { DemoModel } from '../src/roles/demo-model.js';
import { submitAndFollow } from '../src/runtime/services.js';
import type { Role, RunEvent } from '../src/schemas/index.js';
import { DelayedModel } from './delayed-model.js';
import { sleep } from './measure.js';
import { natsConnector, startBenchNatsServer, startDeployment } from './nats-deployment.js';

/**
 * Section 5: throughput against the number of workers per role on NATS. For each W a fresh
 * nats-server, W workers per role (each on its own connection, one request at a time), one
 * coordinator service, the persistence actor on its durable consumer and a client, all in this
 * process; the model answers each call after a fixed delay, as a remote model would. Enough runs
 * are kept in flight to keep every worker busy, and the runs that close within a fixed window,
 * after a warm-up, give runs per minute.
 */

/** Settings of the scaling section. */
export interface ScalingSettings {
  /** Root of the temporary logs and pid files. */
  dir: string;
  workers: readonly number[];
  /** Runs kept in flight per worker of a role. */
  runsPerWorker: number;
  modelDelayMs: number;
  /**
   * Lane starts are spread evenly over this many ms (about one run's duration at saturation), so
   * that runs do not close in clumps of W × runsPerWorker; the warm-up follows the last start.
   */
  startSpreadMs: number;
  warmupMs: number;
  windowMs: number;
  /** DemoModel's plan cut to this many steps. */
  maxSteps: number;
  /** 0: every step gets one attempt (DemoModel fails both), so a run makes a fixed number of calls. */
  maxRetriesPerStep: number;
}

/** Figures of one configuration. */
export interface ScalingFigures {
  workersPerRole: number;
  runsInFlight: number;
  windowMs: number;
  /** Runs whose closing event arrived within the window. */
  runsCompleted: number;
  /** `runsCompleted` per minute of the window: coarse, runs close in clumps. */
  closedRunsPerMinute: number;
  /**
   * Model calls answered in the window ÷ calls per run, per minute: the runs' worth of work done,
   * which counts a run's progress as it happens instead of at its end (the reported figure).
   */
  runsPerMinute: number;
  /** Model calls answered within the window, every role. */
  modelCalls: number;
  /** Model calls of each run that closed in the window (all equal, checked). */
  callsPerRun: number;
  /** Share of the window each role's workers spent inside the model (calls × delay / (W × window)). */
  busy: Record<Role, number>;
  /** Mean time from submission to closing event of the runs that closed in the window. */
  meanRunMs: number;
  /** Events the client followed within the window. */
  events: number;
  /** This process's CPU time in the window, in % of one core. */
  processCpuPercent: number;
  /** The nats-server's CPU time in the window, in % of one core (null when it cannot be read). */
  serverCpuPercent: number | null;
  /** Events the persistence actor had not yet received at the end of the window. */
  persistenceBacklog: number | null;
  /** Runs still going at the end, interrupted; and how long stopping everything took. */
  interrupted: number;
  stopMs: number;
}

/** Results of the scaling section, with each W's runs per minute over W = first's. */
export interface ScalingResults {
  settings: Omit<ScalingSettings, 'dir'>;
  configurations: ScalingFigures[];
  ratios: { workersPerRole: number; ratio: number }[];
}

const TASK = 'Write a two-part technical note (NATS scaling benchmark)';
/**
 * How long the persistence actor may take to catch up at the end: 5 s, plus 2 ms per event it
 * was behind at the end of the window (it writes thousands a second, section 8), so that a
 * configuration that outruns it is reported with its backlog rather than failed.
 */
const catchUpMs = (backlog: number | null) => 5_000 + 2 * (backlog ?? 0);

/** Runs one configuration on a fresh server: `workers` per role, `runsPerWorker × workers` runs in flight. */
async function measureConfiguration(settings: ScalingSettings, workers: number): Promise<ScalingFigures> {
  const dir = join(settings.dir, `nats-scaling-${workers}`);
  mkdirSync(dir, { recursive: true });
  const server = await startBenchNatsServer(join(dir, 'nats-server.pid'));
  const errors: string[] = [];
  const models = new Map<Role, DelayedModel[]>([
    ['planner', []],
    ['generator', []],
    ['evaluator', []],
  ]);
  try {
    const deployment = await startDeployment({
      connect: natsConnector(server.url, errors),
      durablePersistence: true,
      workersPerRole: workers,
      concurrency: 1,
      model: (role) => {
        const model = new DelayedModel(new DemoModel(), settings.modelDelayMs);
        models.get(role)?.push(model);
        return model;
      },
      workingDirectory: dir,
      maxSteps: settings.maxSteps,
      maxRetriesPerStep: settings.maxRetriesPerStep,
      errors,
    });
    const calls = (role: Role) => (models.get(role) ?? []).reduce((n, m) => n + m.calls, 0);
    const counts = { runs: 0, events: 0, runMs: 0, callsOfRuns: new Set<number>() };
    let stopping = false;
    let measuring = false;

    const lane = async (): Promise<void> => {
      while (!stopping) {
        const submitted = performance.now();
        let closing: Promise<RunEvent>;
        try {
          ({ closing } = await submitAndFollow(
            deployment.client,
            {
              task: TASK,
              // One step at a time, as the figures before steps ran side by side: this section
              // measures runs side by side, and the demo's first two steps are independent.
              options: {
                maxSteps: settings.maxSteps,
                maxRetriesPerStep: settings.maxRetriesPerStep,
                maxParallelSteps: 1,
              },
            },
            () => {
              if (measuring) counts.events++;
            },
            { timeoutMs: 5_000 },
          ));
        } catch (error) {
          if (stopping) return; // the coordinator stopped taking submissions
          throw error;
        }
        const last = await closing;
        if (stopping || !measuring) continue;
        // A run that failed would measure something else than the loop: stop the bench instead.
        if (last.type !== 'run.completed') throw new Error(`scaling: run ${last.runId} failed: ${last.type}`);
        counts.runs++;
        counts.runMs += performance.now() - submitted;
        counts.callsOfRuns.add(last.payload.usage.calls);
      }
    };

    const runsInFlight = settings.runsPerWorker * workers;
    const lanes = Array.from({ length: runsInFlight }, async (_, i) => {
      await sleep((i * settings.startSpreadMs) / runsInFlight);
      await lane();
    });
    // A lane that throws ends the configuration; the others are stopped below.
    const failed = Promise.all(lanes).then(
      () => null,
      (error: unknown) => error,
    );
    await Promise.race([sleep(settings.startSpreadMs + settings.warmupMs), failed]);

    const before = {
      calls: { planner: calls('planner'), generator: calls('generator'), evaluator: calls('evaluator') },
      cpu: process.cpuUsage(),
      server: server.cpuMs(),
      at: performance.now(),
    };
    measuring = true;
    await Promise.race([sleep(settings.windowMs), failed]);
    measuring = false;
    const windowMs = performance.now() - before.at;
    const cpu = process.cpuUsage(before.cpu);
    const serverAfter = server.cpuMs();
    const answered = (role: Role) => calls(role) - before.calls[role];
    const inWindow = {
      planner: answered('planner'),
      generator: answered('generator'),
      evaluator: answered('evaluator'),
    };
    const busy = (role: Role) => (inWindow[role] * settings.modelDelayMs) / (workers * windowMs);
    const modelCalls = inWindow.planner + inWindow.generator + inWindow.evaluator;
    const persistenceBacklog = await deployment.persistenceBacklog();

    const stopStarted = performance.now();
    stopping = true;
    const interrupted = deployment.coordinator.active.size;
    await deployment.stop(catchUpMs(persistenceBacklog));
    const failure = await failed;
    const stopMs = performance.now() - stopStarted;
    if (failure !== null) throw failure;
    if (errors.length > 0) throw new Error(`scaling with ${workers} workers per role: ${errors.join('; ')}`);
    if (counts.callsOfRuns.size !== 1) {
      throw new Error(
        `scaling: runs made ${[...counts.callsOfRuns].join(', ')} model calls; expected one count`,
      );
    }
    const callsPerRun = [...counts.callsOfRuns][0] ?? Number.NaN;
    return {
      workersPerRole: workers,
      runsInFlight,
      windowMs,
      runsCompleted: counts.runs,
      closedRunsPerMinute: (counts.runs * 60_000) / windowMs,
      runsPerMinute: (modelCalls * 60_000) / callsPerRun / windowMs,
      modelCalls,
      callsPerRun,
      busy: { planner: busy('planner'), generator: busy('generator'), evaluator: busy('evaluator') },
      meanRunMs: counts.runs > 0 ? counts.runMs / counts.runs : 0,
      events: counts.events,
      processCpuPercent: (cpu.user + cpu.system) / 10 / windowMs,
      serverCpuPercent:
        before.server === null || serverAfter === null
          ? null
          : ((serverAfter - before.server) * 100) / windowMs,
      persistenceBacklog,
      interrupted,
      stopMs,
    };
  } finally {
    await server.stop();
  }
}

/** Measures every configuration in turn, each on a fresh server. */
export async function measureNatsScaling(settings: ScalingSettings): Promise<ScalingResults> {
  const configurations: ScalingFigures[] = [];
  for (const workers of settings.workers) {
    const figures = await measureConfiguration(settings, workers);
    process.stderr.write(`W=${workers} ${figures.runsPerMinute.toFixed(1)} runs/min… `);
    configurations.push(figures);
  }
  const base = configurations[0]?.runsPerMinute ?? Number.NaN;
  const { dir: _dir, ...rest } = settings;
  return {
    settings: rest,
    configurations,
    ratios: configurations.map((c) => ({ workersPerRole: c.workersPerRole, ratio: c.runsPerMinute / base })),
  };
}
