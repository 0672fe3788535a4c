import type { ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Bus } from '../src/bus/bus.js';
import { DemoModel } from '../src/roles/demo-model.js';
import { createRoleWorker, type RoleWorker } from '../src/roles/role-worker.js';
import { submitAndFollow } from '../src/runtime/services.js';
import type { Role } from '../src/schemas/index.js';
import { type CpuLimit, createCpuLimit } from './cpu-limit.js';
import { DelayedModel } from './delayed-model.js';
import { medianValue, sleep } from './measure.js';
import {
  natsConnector,
  processCpuMs,
  startBenchNatsServer,
  startCoordinatorProcess,
} from './nats-deployment.js';

/**
 * Section 11: what one coordinator drives, and whether a second one adds to it. On a fresh
 * nats-server, `workersPerRole` role workers per role in this process (the demo model, answering
 * at once: the model is never what waits), and one or two coordinators, each its own process
 * (`pge worker --role coordinator`, as a deployment runs them: two coordinators in one process
 * would share one core's event loop, and measure that loop). A client here keeps `runsInFlight`
 * runs submitted (`pge.runs.submit` spreads them over the coordinators) and counts the model
 * calls answered within a window after a warm-up. Then the runs one coordinator holds: with a
 * model that never answers, `heldRuns` runs are submitted to one coordinator process and its
 * resident memory is read before and after (`/proc/<pid>/status`, Linux).
 *
 * Two coordinators can only drive twice the calls of one if the machine has the cores for both and
 * for what they drive: on 2 cores, the workers, the client and nats-server take most of what one
 * coordinator leaves. So each coordinator is given the same CPU budget (`coordinatorCpus`, a cgroup
 * quota, `cpu-limit.ts`), as a container limit gives each replica of a deployment: one coordinator
 * at its budget against two, each at theirs, is what a second replica adds, with the cores that
 * budgets leave for the rest. Without a writable cgroup, the coordinators run unbounded and the
 * report says so.
 */

/** Settings of the section. */
export interface ConductorSettings {
  dir: string;
  workersPerRole: number;
  /** Requests each worker handles at once. */
  workerConcurrency: number;
  runsInFlight: number;
  warmupMs: number;
  windowMs: number;
  maxSteps: number;
  maxRetriesPerStep: number;
  /** Runs held by one coordinator for the memory figure. */
  heldRuns: number;
  /** Cores each coordinator may use (a cgroup quota); null: unbounded. */
  coordinatorCpus: number | null;
  /**
   * One coordinator then two, this many times: the machine's speed drifts between minutes (a VM's
   * neighbours), so each pair's ratio is taken, and their median reported.
   */
  pairs: number;
}

/** Figures of one set-up. */
export interface ConductorFigures {
  coordinators: number;
  modelCalls: number;
  windowMs: number;
  callsPerSecond: number;
  /** This process's CPU (workers and client), % of one core. */
  benchCpuPercent: number;
  /** The coordinators' CPU, summed, % of one core (null off Linux). */
  coordinatorCpuPercent: number | null;
  /** Cores each coordinator was given (its cgroup quota); null: unbounded. */
  coordinatorCpus: number | null;
  /**
   * The coordinators' CPU time per model call (null off Linux): what bounds one coordinator on a
   * core of its own, 1000 / this calls per second, whatever else shares the machine.
   */
  coordinatorCpuMsPerCall: number | null;
  serverCpuPercent: number | null;
}

/** One coordinator, then two right after: their calls per second, and two over one. */
export interface ConductorPair {
  one: ConductorFigures;
  two: ConductorFigures;
  ratio: number;
}

/** What the section measured. */
export interface ConductorResults {
  settings: Omit<ConductorSettings, 'dir'>;
  pairs: ConductorPair[];
  /** The median of the pairs' ratios: calls per second of two coordinators over one. */
  ratio: number;
  /** Why the coordinators ran unbounded though a budget was asked for (no writable cgroup). */
  unbounded: string | null;
  /** One coordinator holding `heldRuns` runs: its resident memory before and after, and per run. */
  held: { runs: number; rssBeforeBytes: number; rssAfterBytes: number; bytesPerRun: number } | null;
}

const ROLES: readonly Role[] = ['planner', 'generator', 'evaluator'];
const TASK = 'Write a two-part technical note (conductor benchmark)';
/** A model call that never answers within the section: runs stay held at their plan. */
const NEVER_MS = 3_600_000;

/** A field of `/proc/<pid>/status` or `/proc/<pid>/stat`, or null off Linux. */
function procStatus(pid: number | undefined, field: 'VmRSS'): number | null {
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8').match(
      new RegExp(`^${field}:\\s+(\\d+) kB`, 'm'),
    );
    return line ? Number(line[1]) * 1024 : null;
  } catch {
    return null;
  }
}

/**
 * The budget each coordinator can be given: `cpus` where a cgroup can be made here (one is made
 * and removed to find out), else none, and why.
 */
function availableBudget(cpus: number | null): { cpus: number | null; unbounded: string | null } {
  if (cpus === null) return { cpus: null, unbounded: null };
  const probe = createCpuLimit(`pge-bench-${process.pid}-probe`, cpus);
  if ('unavailable' in probe) return { cpus: null, unbounded: probe.unavailable };
  probe.remove();
  return { cpus, unbounded: null };
}

/**
 * Starts `count` coordinator processes, each in a cgroup of its own with `cpus` cores when given
 * (moved there once ready: loading pge from the sources is not what is measured). Each child and
 * cgroup goes into `children` and `limits` as it is made, for the caller to stop and remove.
 */
async function startCoordinators(
  url: string,
  count: number,
  cpus: number | null,
  children: ChildProcess[],
  limits: CpuLimit[],
): Promise<void> {
  for (let i = 1; i <= count; i++) {
    const child = await startCoordinatorProcess(url, `coord-${i}`);
    children.push(child);
    if (cpus === null || child.pid === undefined) continue;
    const limit = createCpuLimit(`pge-bench-${process.pid}-coord-${i}`, cpus);
    // `availableBudget` made one a moment ago: failing now is a fault, not a machine without cgroups.
    if ('unavailable' in limit) throw new Error(`conductor: ${limit.unavailable}`);
    limits.push(limit);
    limit.add(child.pid);
  }
}

/** Kills `children`, waits for them to exit, and removes their cgroups. */
async function stopCoordinators(children: readonly ChildProcess[], limits: readonly CpuLimit[]) {
  await Promise.all(
    children.map((child) =>
      child.exitCode !== null || child.signalCode !== null
        ? undefined
        : new Promise((resolve) => {
            child.once('exit', resolve);
            child.kill('SIGKILL');
          }),
    ),
  );
  for (const limit of limits) limit.remove();
}

/** The deployment of one set-up: server, workers and coordinators; `models` count the calls. */
async function deploy(settings: ConductorSettings, coordinators: number, delayMs: number, name: string) {
  const dir = join(settings.dir, name);
  mkdirSync(dir, { recursive: true });
  const server = await startBenchNatsServer(join(dir, 'nats-server.pid'));
  const errors: string[] = [];
  const connect = natsConnector(server.url, errors);
  const buses: Bus[] = [];
  const workers: RoleWorker[] = [];
  const models: DelayedModel[] = [];
  const children: ChildProcess[] = [];
  const limits: CpuLimit[] = [];
  try {
    await startCoordinators(server.url, coordinators, settings.coordinatorCpus, children, limits);
    for (const role of ROLES) {
      for (let i = 1; i <= settings.workersPerRole; i++) {
        const bus = await connect(`${role}-${i}`);
        buses.push(bus);
        const model = new DelayedModel(new DemoModel(), delayMs);
        models.push(model);
        workers.push(
          createRoleWorker({
            bus,
            role,
            model,
            concurrency: settings.workerConcurrency,
            workerId: `${role}-${i}`,
          }),
        );
      }
    }
    const client = await connect('client');
    buses.push(client);
    await Promise.all(buses.map((bus) => bus.flush()));
    return {
      server,
      client,
      errors,
      children,
      calls: () => models.reduce((n, m) => n + m.calls, 0),
      coordinatorCpuMs: () => {
        const each = children.map((child) => (child.pid === undefined ? null : processCpuMs(child.pid)));
        return each.some((ms) => ms === null) ? null : each.reduce<number>((sum, ms) => sum + ms!, 0);
      },
      async stop() {
        await stopCoordinators(children, limits);
        await Promise.all(workers.map((worker) => worker.stop('abort')));
        await Promise.all(buses.map((bus) => bus.close()));
        await server.stop();
      },
    };
  } catch (error) {
    await stopCoordinators(children, limits);
    await server.stop();
    throw error;
  }
}

/** Submits runs one after another on one lane until `stopping()`; each waits for its run's end. */
async function lane(client: Bus, settings: ConductorSettings, stopping: () => boolean): Promise<void> {
  const options = {
    maxSteps: settings.maxSteps,
    maxRetriesPerStep: settings.maxRetriesPerStep,
    maxParallelSteps: 1,
  };
  while (!stopping()) {
    let closing: Promise<{ type: string }>;
    try {
      ({ closing } = await submitAndFollow(client, { task: TASK, options }, () => {}, { timeoutMs: 30_000 }));
    } catch (error) {
      if (stopping()) return;
      throw error;
    }
    const last = await closing.catch((error: unknown) =>
      stopping() ? { type: 'stopped' } : Promise.reject(error),
    );
    if (!stopping() && last.type !== 'run.completed') throw new Error(`conductor: a run ended ${last.type}`);
  }
}

/** Calls per second with `coordinators` coordinator processes. */
async function measureSetup(settings: ConductorSettings, coordinators: number): Promise<ConductorFigures> {
  const deployment = await deploy(settings, coordinators, 0, `conductor-${coordinators}`);
  let stopping = false;
  try {
    const lanes = Array.from({ length: settings.runsInFlight }, () =>
      lane(deployment.client, settings, () => stopping),
    );
    const failed = Promise.all(lanes).then(
      () => null,
      (error: unknown) => error,
    );
    await Promise.race([sleep(settings.warmupMs), failed]);
    const before = {
      calls: deployment.calls(),
      cpu: process.cpuUsage(),
      coordinators: deployment.coordinatorCpuMs(),
      server: deployment.server.cpuMs(),
      at: performance.now(),
    };
    await Promise.race([sleep(settings.windowMs), failed]);
    const windowMs = performance.now() - before.at;
    const modelCalls = deployment.calls() - before.calls;
    const cpu = process.cpuUsage(before.cpu);
    const coordinatorsAfter = deployment.coordinatorCpuMs();
    const serverAfter = deployment.server.cpuMs();
    stopping = true;
    const failure = await Promise.race([failed, sleep(100).then(() => null)]);
    if (failure !== null) throw failure;
    if (deployment.errors.length > 0) throw new Error(`conductor: ${deployment.errors.join('; ')}`);
    const share = (from: number | null, to: number | null) =>
      from === null || to === null ? null : ((to - from) * 100) / windowMs;
    return {
      coordinators,
      modelCalls,
      windowMs,
      callsPerSecond: (modelCalls * 1000) / windowMs,
      benchCpuPercent: (cpu.user + cpu.system) / 10 / windowMs,
      coordinatorCpuPercent: share(before.coordinators, coordinatorsAfter),
      coordinatorCpus: settings.coordinatorCpus,
      coordinatorCpuMsPerCall:
        before.coordinators === null || coordinatorsAfter === null || modelCalls === 0
          ? null
          : (coordinatorsAfter - before.coordinators) / modelCalls,
      serverCpuPercent: share(before.server, serverAfter),
    };
  } finally {
    stopping = true;
    await deployment.stop();
  }
}

/** One coordinator process holding `heldRuns` runs, each waiting on a model call that does not end. */
async function measureHeld(settings: ConductorSettings): Promise<ConductorResults['held']> {
  // Memory does not depend on the CPU budget; submitting the runs goes faster without one.
  const deployment = await deploy(
    {
      ...settings,
      workerConcurrency: Math.ceil(settings.heldRuns / settings.workersPerRole) + 1,
      coordinatorCpus: null,
    },
    1,
    NEVER_MS,
    'conductor-held',
  );
  try {
    const pid = deployment.children[0]?.pid;
    await sleep(1_000);
    const rssBeforeBytes = procStatus(pid, 'VmRSS');
    if (rssBeforeBytes === null) return null;
    const options = { maxSteps: settings.maxSteps, maxRetriesPerStep: settings.maxRetriesPerStep };
    const follows: (() => void)[] = [];
    for (let i = 0; i < settings.heldRuns; i += 50) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(50, settings.heldRuns - i) }, () =>
          submitAndFollow(deployment.client, { task: TASK, options }, () => {}, { timeoutMs: 30_000 }),
        ),
      );
      for (const run of batch) {
        run.closing.catch(() => undefined); // ended by the stop below
        follows.push(run.stop);
      }
    }
    // Every run has asked for its plan once the planners hold one call per run.
    await sleep(3_000);
    const rssAfterBytes = procStatus(pid, 'VmRSS') ?? rssBeforeBytes;
    for (const stop of follows) stop();
    return {
      runs: settings.heldRuns,
      rssBeforeBytes,
      rssAfterBytes,
      bytesPerRun: (rssAfterBytes - rssBeforeBytes) / settings.heldRuns,
    };
  } finally {
    await deployment.stop();
  }
}

/** Runs the section: one coordinator, two, then the runs one holds. */
export async function measureConductor(settings: ConductorSettings): Promise<ConductorResults> {
  const { cpus, unbounded } = availableBudget(settings.coordinatorCpus);
  const budgeted = { ...settings, coordinatorCpus: cpus };
  const pairs: ConductorPair[] = [];
  for (let i = 0; i < settings.pairs; i++) {
    const one = await measureSetup(budgeted, 1);
    process.stderr.write(`1 coordinator ${one.callsPerSecond.toFixed(0)} calls/s, `);
    const two = await measureSetup(budgeted, 2);
    process.stderr.write(`2 coordinators ${two.callsPerSecond.toFixed(0)} calls/s… `);
    pairs.push({ one, two, ratio: two.callsPerSecond / one.callsPerSecond });
  }
  const held = await measureHeld(settings);
  const { dir: _dir, ...rest } = settings;
  const ratio = medianValue(pairs.map((pair) => pair.ratio));
  return { settings: rest, pairs, ratio, unbounded, held };
}

/** How the coordinators' CPU was bounded, in words. */
function budget(r: ConductorResults): string {
  const cpus = r.pairs[0]?.one.coordinatorCpus ?? null;
  if (cpus !== null) return `each coordinator given ${cpus} of a core (a cgroup quota, as a container limit)`;
  if (r.unbounded !== null) return `coordinators unbounded: ${r.unbounded}`;
  return 'coordinators unbounded: they share the machine with everything else';
}

/** The section's lines in the report. */
export function conductorLines(
  r: ConductorResults | { skipped: string },
  table: (header: readonly string[], rows: readonly (readonly string[])[]) => string,
): string[] {
  if ('skipped' in r) return [`11. Coordinators: skipped (${r.skipped})`, ''];
  const s = r.settings;
  const pct = (n: number | null) => (n === null ? '-' : `${n.toFixed(0)} %`);
  // Each coordinator's share of its budget: near 100 % says the budget, not the rest, bounded it.
  const ofBudget = (f: ConductorFigures) =>
    f.coordinatorCpus === null || f.coordinatorCpuPercent === null
      ? ''
      : ` (${((f.coordinatorCpuPercent / (f.coordinators * f.coordinatorCpus * 100)) * 100).toFixed(0)} % of budget)`;
  const row = (pair: number, f: ConductorFigures) => [
    String(pair),
    String(f.coordinators),
    Math.round(f.callsPerSecond).toLocaleString('en-US'),
    `${pct(f.coordinatorCpuPercent)}${ofBudget(f)}`,
    f.coordinatorCpuMsPerCall === null ? '-' : f.coordinatorCpuMsPerCall.toFixed(2),
    pct(f.benchCpuPercent),
    pct(f.serverCpuPercent),
  ];
  const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
  return [
    `11. Coordinators on NATS (each its own process; ${s.workersPerRole} workers per role × ${s.workerConcurrency} at once, demo model`,
    `    answering at once; ${s.runsInFlight} runs kept in flight; model calls answered in ${s.windowMs / 1000} s after ${s.warmupMs / 1000} s)`,
    table(
      [
        'pair',
        'coordinators',
        'calls/s',
        'coordinators CPU',
        'CPU ms/call',
        'workers+client CPU',
        'server CPU',
      ],
      r.pairs.flatMap((pair, i) => [row(i + 1, pair.one), row(i + 1, pair.two)]),
    ),
    `    two over one: ${r.ratio.toFixed(2)}×, the median of ${r.pairs.map((pair) => `${pair.ratio.toFixed(2)}×`).join(', ')} (target ≥ 1.8×),`,
    `    ${budget(r)}`,
    r.held === null
      ? '    runs held by one coordinator: not measured (no /proc)'
      : `    one coordinator holding ${r.held.runs} runs (each at its plan call): RSS ${mib(r.held.rssBeforeBytes)} → ${mib(r.held.rssAfterBytes)}, ${(r.held.bytesPerRun / 1024).toFixed(1)} KiB per run`,
    '',
  ];
}
