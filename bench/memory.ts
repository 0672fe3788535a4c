import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { PlannerGeneratorEvaluator } from '../src/api/planner-generator-evaluator.js';
import { InstantModel } from './instant-model.js';
import { collectGarbage, sleep } from './measure.js';
import { Gate, MeteredModel } from './metered-model.js';

/**
 * Section 4: memory per active run. Starts many runs at once on one embedded instance with a model
 * that answers plans, contracts and reviews at once but holds every work call until released, so
 * each run has its plan and is inside its first step when the heap is measured. Then the gate
 * opens, the runs go on for a bounded window (which measures the cost per call with that many runs
 * in flight), and the ones still going are interrupted.
 */

/** Figures of the memory section. */
export interface MemoryFigures {
  runs: number;
  /** Work calls held at the gate when the heap was measured. */
  callsHeld: number;
  /** Model calls answered before the heap was measured (plans, contracts, reviews). */
  callsBeforeMeasure: number;
  heapBeforeBytes: number;
  heapDuringBytes: number;
  bytesPerRun: number;
  rssDeltaBytes: number;
  /** Open file descriptors during minus before (one log handle per run is expected). */
  fdDelta: number | null;
  /** How long after release the runs were left to go on before the rest were interrupted. */
  drainWindowMs: number;
  callsInWindow: number;
  runsFinishedInWindow: number;
  /** Wall time per model call in the window, with up to `runs` runs in flight. */
  usPerCallInWindow: number;
  /** From `interrupt()` to the end of every run. */
  interruptMs: number;
}

const openFds = (): number | null =>
  existsSync('/proc/self/fd') ? readdirSync('/proc/self/fd').length : null;

/** Waits until `probe` returns the same value for `quietMs`. */
async function settled(probe: () => string, quietMs: number, limitMs: number): Promise<void> {
  const deadline = performance.now() + limitMs;
  let last = probe();
  let since = performance.now();
  while (performance.now() < deadline) {
    await sleep(25);
    const now = probe();
    if (now !== last) {
      last = now;
      since = performance.now();
    } else if (performance.now() - since >= quietMs) return;
  }
  throw new Error(`the runs did not settle within ${limitMs} ms (last state ${last})`);
}

/** Settings of the memory section. */
export interface MemorySettings {
  dir: string;
  runs: number;
  steps: number;
  /** After release, how long the runs may go on before the rest are interrupted. */
  drainWindowMs: number;
}

/**
 * Memory per run with `runs` runs in flight at once. The default options are used (no `onEvent`),
 * so each run costs what the harness itself keeps for it.
 */
export async function measureMemory(settings: MemorySettings): Promise<MemoryFigures> {
  const { runs, steps } = settings;
  const workingDirectory = join(settings.dir, 'memory');
  mkdirSync(workingDirectory, { recursive: true });
  const gate = new Gate(['work']);
  const model = new MeteredModel(new InstantModel(steps), { gate });
  const pge = new PlannerGeneratorEvaluator({
    plannerAgent: model,
    generatorAgent: model,
    evaluatorAgent: model,
    workingDirectory,
    maxSteps: steps,
  });
  let finished = 0;
  try {
    // One finished run before the gate is armed, so that the runtime, its workers and the compiled
    // code are in the baseline: measuring starts from an instance that exists and holds no run.
    await pge.run('Warm-up run (benchmark task)');
    gate.arm();
    model.reset();

    collectGarbage();
    const heapBefore = process.memoryUsage().heapUsed;
    const rssBefore = process.memoryUsage().rss;
    const fdBefore = openFds();

    const done = Array.from({ length: runs }, (_, i) =>
      pge.run(`Document ${i} (benchmark task)`).then(() => {
        finished++;
      }),
    );
    const all = Promise.all(done);
    // Awaited after the measure; until then this only keeps an early failure from being unhandled.
    all.catch(() => undefined);
    await settled(() => `${model.calls}/${gate.waiting}`, 500, 60_000);
    collectGarbage();
    const heapDuring = process.memoryUsage().heapUsed;
    const rssDuring = process.memoryUsage().rss;
    const fdDuring = openFds();
    const callsHeld = gate.waiting;
    const callsBeforeMeasure = model.calls - callsHeld;

    const released = performance.now();
    const callsBefore = model.calls;
    gate.release();
    await Promise.race([all, sleep(settings.drainWindowMs)]);
    const drainWindowMs = performance.now() - released;
    const callsInWindow = model.calls - callsBefore;
    const runsFinishedInWindow = finished;
    const interrupted = performance.now();
    pge.interrupt();
    await all;
    const interruptMs = performance.now() - interrupted;
    return {
      runs,
      callsHeld,
      callsBeforeMeasure,
      heapBeforeBytes: heapBefore,
      heapDuringBytes: heapDuring,
      bytesPerRun: (heapDuring - heapBefore) / runs,
      rssDeltaBytes: rssDuring - rssBefore,
      fdDelta: fdBefore !== null && fdDuring !== null ? fdDuring - fdBefore : null,
      drainWindowMs,
      callsInWindow,
      runsFinishedInWindow,
      usPerCallInWindow: (drainWindowMs * 1000) / Math.max(1, callsInWindow),
      interruptMs,
    };
  } finally {
    gate.release();
    await pge.close();
  }
}
