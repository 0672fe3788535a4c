import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** Helpers shared by the sections of the benchmark: a run pool, the figures of a timed batch, GC. */

/** Figures of one timed batch of runs. */
export interface LoopFigures {
  runs: number;
  concurrency: number;
  calls: number;
  wallMs: number;
  /** CPU time of the process (user + system, every thread) during the batch. */
  cpuMs: number;
  /** Time spent inside the model itself (answer building, prompt parsing, JSON). */
  modelMs: number;
  /** Wall time per model call, model time included. */
  usPerCallGross: number;
  /** Wall time minus model time, per model call: the loop's own cost, waiting for the disk included. */
  usPerCall: number;
  /** CPU time minus model time, per model call. */
  cpuUsPerCall: number;
  callsPerSecond: number;
}

/** Figures of a batch on the pge harness, with the events it published. */
export interface HarnessFigures extends LoopFigures {
  events: number;
  eventsPerSecond: number;
}

/** Runs `body` and reports its wall and CPU time. */
export async function timed(body: () => Promise<void>): Promise<{ wallMs: number; cpuMs: number }> {
  const cpu = process.cpuUsage();
  const started = performance.now();
  await body();
  const wallMs = performance.now() - started;
  const used = process.cpuUsage(cpu);
  return { wallMs, cpuMs: (used.user + used.system) / 1000 };
}

/** Computes the per-call figures of a batch. */
export function loopFigures(
  batch: { runs: number; concurrency: number; calls: number; modelMs: number },
  time: { wallMs: number; cpuMs: number },
): LoopFigures {
  const { calls, modelMs } = batch;
  return {
    ...batch,
    ...time,
    usPerCallGross: (time.wallMs * 1000) / calls,
    usPerCall: ((time.wallMs - modelMs) * 1000) / calls,
    cpuUsPerCall: ((time.cpuMs - modelMs) * 1000) / calls,
    callsPerSecond: calls / (time.wallMs / 1000),
  };
}

/**
 * Repeats a batch `reps` times and keeps the one with the median net µs per call: a single batch
 * on a shared 2-core machine moves by ±15 % with GC and disk latency.
 */
export async function median<F extends LoopFigures>(reps: number, batch: () => Promise<F>): Promise<F> {
  const all: F[] = [];
  for (let i = 0; i < reps; i++) all.push(await batch());
  return medianOf(all);
}

/** The batch with the median net µs per call. */
export function medianOf<F extends LoopFigures>(batches: readonly F[]): F {
  const sorted = [...batches].sort((a, b) => a.usPerCall - b.usPerCall);
  return sorted[Math.floor(sorted.length / 2)]!;
}

/** The median of `values` (the upper one of an even count). */
export function medianValue(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

/** Runs `run` `count` times, keeping `concurrency` runs in flight; rejects with the first failure. */
export async function pool(count: number, concurrency: number, run: (index: number) => Promise<void>) {
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < count) {
      const index = next++;
      await run(index);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, lane));
}

let gcFunction: (() => void) | null = null;

/**
 * A full garbage collection. Uses `global.gc` when Node runs with `--expose-gc`; otherwise sets
 * the flag at run time and takes `gc` from a fresh context, so `npm run bench` needs no flag.
 */
export function collectGarbage(): void {
  if (gcFunction === null) {
    const exposed = (globalThis as { gc?: () => void }).gc;
    if (typeof exposed === 'function') gcFunction = exposed;
    else {
      setFlagsFromString('--expose-gc');
      gcFunction = runInNewContext('gc') as () => void;
    }
  }
  // Twice: the first pass can leave objects that only become unreachable after finalizers ran.
  gcFunction();
  gcFunction();
}

/** Waits `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
