import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { findNatsServer } from '../tests/support/nats-server.js';
import { type ConductorResults, measureConductor } from './conductor-scaling.js';
import { measureOverhead } from './harness-overhead.js';
import { measureImportTime } from './import-time.js';
import { measureMemory } from './memory.js';
import { measureBusOverhead } from './nats-overhead.js';
import { type NatsResults, natsSummary } from './nats-report.js';
import { measureNatsScaling } from './nats-scaling.js';
import { measureParallelSteps, type ParallelResults } from './parallel-steps.js';
import { type CatchUpResults, measurePersistenceCatchUp } from './persistence-catchup.js';
import { measurePromptSizes } from './prompt-size.js';
import {
  type BenchResults,
  printCatchUpReport,
  printConductorReport,
  printNatsReport,
  printParallelReport,
  printReport,
} from './report.js';
import { measureTakeover, type TakeoverResults } from './takeover.js';

/**
 * `npm run bench`: the harness's overhead per model call against a bare XState loop, prompt size
 * against steps run, memory per active run, on a private nats-server throughput against workers
 * per role, the bus's cost per model call and a restarted persistence worker's catch-up rate, and
 * the library's import time in a fresh `node`, measured from one process and printed as a table followed by one line of JSON. Logs go to a
 * temporary directory, deleted at the end.
 * See docs/benchmarks.md for what each figure means.
 *
 * `npm run bench -- --only nats` runs sections 5-6 alone (scaling, bus overhead, the floor),
 * `--only catchup` section 8 alone (a restarted persistence worker), `--only conductor` section 11
 * alone (what one and two coordinators drive; not in the whole bench), `--only parallel` section 10 alone (steps side by side), and `--workers 1,2,4,8,16,32` sets the
 * workers per role section 5 measures (default 1, 2, 4, 8), `--coordinator-cpus 0.5` each
 * coordinator's CPU budget in section 11 (default 0.1; `none` for none).
 */

const SETTINGS = {
  /** Steps of the plan in the overhead runs: 1 + 6 × 5 = 31 model calls per run. */
  steps: 5,
  /**
   * Warm-up runs of each loop of sections 1-2, sequential and then concurrent, before any is
   * timed: V8 takes about this many runs to settle on pge's code (docs/benchmarks.md), and both
   * loops get the same warm-up, so the figures are a long-lived process's steady state.
   */
  warmupRuns: 1000,
  runs: 200,
  /** Batches per figure of sections 1-2, pge's and the bare loop's alternating; the median is reported. */
  reps: 5,
  concurrency: 50,
  memoryRuns: 1000,
  /** After the memory measure, how long the 1,000 runs go on before the rest are interrupted. */
  drainWindowMs: 10_000,
  /** Fresh `node` processes per import timed in section 7. */
  importRuns: 11,
} as const;

/** Settings of sections 5-6 (NATS). */
const NATS_SETTINGS = {
  scaling: {
    workers: [1, 2, 4, 8],
    runsPerWorker: 4,
    modelDelayMs: 200,
    /** About one run's duration at saturation: 4 runs per worker × 5 generator calls × 200 ms. */
    startSpreadMs: 4_000,
    warmupMs: 4_000,
    windowMs: 20_000,
    maxSteps: 2,
    maxRetriesPerStep: 0,
  },
  busOverhead: {
    steps: 3,
    warmupRuns: 20,
    runs: 50,
    reps: 3,
    workerConcurrency: 4,
    floor: { iterations: 2_000, warmup: 200, coreBytes: 128 },
  },
  /** 200 runs of 1 + 6 × 3 calls (77 events each), half of each written before the restart. */
  catchUp: { runs: 200, steps: 3, writtenBefore: 0.5 },
  /** The work call outlasts the 3 s lease, so the run's call is still in flight at the takeover. */
  takeover: { trials: 3, workDelayMs: 4_000 },
} as const;

/**
 * Settings of section 11: 8 workers per role, each 4 requests at once, 64 runs of 1 + 2 calls ...
 * (the demo's plan cut to 2 steps, one attempt each), and 500 runs held for the memory figure.
 */
const CONDUCTOR_SETTINGS = {
  workersPerRole: 8,
  workerConcurrency: 4,
  runsInFlight: 64,
  warmupMs: 10_000,
  windowMs: 10_000,
  maxSteps: 2,
  maxRetriesPerStep: 0,
  heldRuns: 500,
  /** Each coordinator's CPU budget (cores): see bench/conductor-scaling.ts. */
  coordinatorCpus: 0.1,
  pairs: 3,
} as const;

/** Settings of section 10: each run waits 17 × 400 ms one step at a time, 9 × 400 ms side by side. */
const PARALLEL_SETTINGS = { delayMs: 400, reps: 3 } as const;

/** The parts that run alone with `--only`. */
const ALONE = ['nats', 'catchup', 'parallel', 'conductor'] as const;
type Alone = (typeof ALONE)[number];

/** Why the NATS sections cannot run (no nats-server binary), or null when they can. */
function natsMissing(): { skipped: string } | null {
  try {
    findNatsServer();
    return null;
  } catch (error) {
    return { skipped: error instanceof Error ? error.message : String(error) };
  }
}

/**
 * The command line: `--only nats|catchup|parallel|conductor`, `--workers <list>`,
 * `--coordinator-cpus <cores>|none`.
 */
function options(): { only: Alone | null; workers: readonly number[]; coordinatorCpus: number | null } {
  const { values } = parseArgs({
    options: {
      only: { type: 'string' },
      workers: { type: 'string' },
      'coordinator-cpus': { type: 'string' },
    },
    strict: true,
    allowPositionals: false,
  });
  const only = values.only === undefined ? null : ALONE.find((part) => part === values.only);
  if (only === undefined) {
    throw new Error(
      `--only ${values.only}: the parts that run alone are ${ALONE.map((p) => `"${p}"`).join(', ')}`,
    );
  }
  let workers: readonly number[] = NATS_SETTINGS.scaling.workers;
  if (values.workers !== undefined) {
    const list = values.workers.split(',').map((w) => Number(w.trim()));
    if (list.some((w) => !Number.isInteger(w) || w < 1) || list[0] !== 1) {
      throw new Error(`--workers ${values.workers}: positive whole numbers, the first 1 (the ratios' base)`);
    }
    workers = list;
  }
  const cpus = values['coordinator-cpus'];
  let coordinatorCpus: number | null = CONDUCTOR_SETTINGS.coordinatorCpus;
  if (cpus !== undefined) {
    coordinatorCpus = cpus === 'none' ? null : Number(cpus);
    if (coordinatorCpus !== null && !(coordinatorCpus > 0))
      throw new Error(`--coordinator-cpus ${cpus}: cores above 0 (0.25, 1.5), or none`);
  }
  return { only, workers, coordinatorCpus };
}

/** Sections 5-6, or why they cannot run. */
async function measureNats(dir: string, workers: readonly number[]): Promise<NatsResults> {
  const missing = natsMissing();
  if (missing) return missing;
  const scaling = await section(`5/10 scaling on NATS (workers per role ${workers.join(', ')})`, () =>
    measureNatsScaling({ dir, ...NATS_SETTINGS.scaling, workers }),
  );
  const busOverhead = await section(
    '6/10 bus overhead per model call, NATS vs in process, and the floor on the same server',
    () => measureBusOverhead({ dir, ...NATS_SETTINGS.busOverhead }),
  );
  return { ...natsSummary(scaling, busOverhead), scaling, busOverhead };
}

/** Section 8, or why it cannot run. */
async function measureCatchUp(dir: string): Promise<CatchUpResults | { skipped: string }> {
  const missing = natsMissing();
  if (missing) return missing;
  const { runs } = NATS_SETTINGS.catchUp;
  return section(`8/10 persistence catch-up on NATS (a restarted worker, ${runs} runs in its backlog)`, () =>
    measurePersistenceCatchUp({ dir, ...NATS_SETTINGS.catchUp }),
  );
}

/** Section 9, or why it cannot run. */
async function measureTakeoverSection(dir: string): Promise<TakeoverResults | { skipped: string }> {
  const missing = natsMissing();
  if (missing) return missing;
  const { trials } = NATS_SETTINGS.takeover;
  return section(`9/10 coordinator takeover on NATS (${trials} SIGKILLs of a run's owner)`, () =>
    measureTakeover({ dir, ...NATS_SETTINGS.takeover }),
  );
}

/** Section 11, or why it cannot run. */
async function measureConductorSection(
  dir: string,
  coordinatorCpus: number | null,
): Promise<ConductorResults | { skipped: string }> {
  const missing = natsMissing();
  if (missing) return missing;
  return section(
    `11 coordinators on NATS (one, then two processes, ${CONDUCTOR_SETTINGS.pairs} times; then the runs one holds)`,
    () => measureConductor({ dir, ...CONDUCTOR_SETTINGS, coordinatorCpus }),
  );
}

/** Section 10 (its NATS configurations only with a nats-server). */
async function measureParallel(dir: string): Promise<ParallelResults> {
  const missing = natsMissing();
  return section(
    '10/10 steps side by side (two chains, --parallel 1 against the default), embedded and on NATS',
    () => measureParallelSteps({ dir, ...PARALLEL_SETTINGS, natsMissing: missing?.skipped ?? null }),
  );
}

/** Runs one section, telling stderr what it does and how long it took. */
async function section<T>(name: string, body: () => Promise<T>): Promise<T> {
  process.stderr.write(`pge bench: ${name}… `);
  const started = performance.now();
  const result = await body();
  process.stderr.write(`${((performance.now() - started) / 1000).toFixed(1)} s\n`);
  return result;
}

/** The machine the figures were measured on. */
function machineInfo(): BenchResults['machine'] {
  const cpu = cpus();
  return {
    date: new Date().toISOString(),
    node: process.version,
    platform: `${process.platform} ${process.arch}`,
    cpus: cpu.length,
    cpuModel: cpu[0]?.model.trim() ?? 'unknown',
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
  };
}

async function main(): Promise<void> {
  const { only, workers, coordinatorCpus } = options();
  const dir = mkdtempSync(join(tmpdir(), 'pge-bench-'));
  const started = performance.now();
  try {
    const machine = machineInfo();
    if (only === 'nats') {
      const nats = await measureNats(dir, workers);
      printNatsReport({ machine, nats, totalSeconds: (performance.now() - started) / 1000 });
      return;
    }
    if (only === 'conductor') {
      const conductor = await measureConductorSection(dir, coordinatorCpus);
      printConductorReport({ machine, conductor, totalSeconds: (performance.now() - started) / 1000 });
      return;
    }
    if (only === 'catchup') {
      const persistenceCatchUp = await measureCatchUp(dir);
      printCatchUpReport({ machine, persistenceCatchUp, totalSeconds: (performance.now() - started) / 1000 });
      return;
    }
    if (only === 'parallel') {
      const parallelSteps = await measureParallel(dir);
      printParallelReport({ machine, parallelSteps, totalSeconds: (performance.now() - started) / 1000 });
      return;
    }
    const { harness, bare, pgeOverBare, parts } = await section(
      '1-2/10 harness overhead (pge runs on the embedded bus, log on disk) beside the bare XState loop, and 2b: its charts and its record alone',
      () => measureOverhead({ dir, ...SETTINGS }),
    );
    const prompts = await section('3/10 prompt size against steps run (plans of 10, 50, 200 steps)', () =>
      measurePromptSizes(dir),
    );
    const memory = await section(`4/10 memory with ${SETTINGS.memoryRuns} runs in flight`, () =>
      measureMemory({
        dir,
        runs: SETTINGS.memoryRuns,
        steps: SETTINGS.steps,
        drainWindowMs: SETTINGS.drainWindowMs,
      }),
    );
    const nats = await measureNats(dir, workers);
    const persistenceCatchUp = await measureCatchUp(dir);
    const takeover = await measureTakeoverSection(dir);
    const parallelSteps = await measureParallel(dir);
    const importTime = await section(
      `7/10 library import time (${SETTINGS.importRuns} fresh node processes per import)`,
      async () => measureImportTime(SETTINGS.importRuns),
    );
    const results: BenchResults = {
      machine,
      settings: SETTINGS,
      harness,
      bare,
      pgeOverBare,
      parts,
      prompts,
      memory,
      nats,
      importTime,
      persistenceCatchUp,
      takeover,
      parallelSteps,
      totalSeconds: (performance.now() - started) / 1000,
    };
    printReport(results);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  console.error('pge bench failed:', error);
  process.exitCode = 1;
});
