import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { PlannerGeneratorEvaluator } from '../src/api/planner-generator-evaluator.js';
import type { RunEvent } from '../src/schemas/index.js';
import { bareLoop } from './bare-xstate.js';
import { callsPerRun, InstantModel } from './instant-model.js';
import {
  type HarnessFigures,
  type LoopFigures,
  loopFigures,
  median,
  medianOf,
  medianValue,
  pool,
  timed,
} from './measure.js';
import { MeteredModel } from './metered-model.js';
import { chartsLoop, eventsOfTheRunIn, recordLoop } from './parts.js';

/**
 * Sections 1-2: the harness's own cost per model call, beside the bare XState loop's. Whole runs
 * through the public API on the embedded runtime (in-process bus, role workers, validation, the
 * markdown log on disk), with an instant model; the model's own time is measured and taken out.
 */

/** Settings of the overhead section. */
export interface OverheadSettings {
  /** Root of the temporary logs. */
  dir: string;
  steps: number;
  warmupRuns: number;
  runs: number;
  /** Batches of `runs` per figure; the median is kept. */
  reps: number;
  concurrency: number;
}

const TASK = 'Write a five-part technical document (benchmark task)';

/** Figures of the pge harness: sequential and concurrent with `onEvent`, and sequential without. */
export interface HarnessResults {
  sequential: HarnessFigures;
  concurrent: HarnessFigures;
  /** Sequential, no `onEvent`: one subscriber fewer per event (the log writer is then the only one). */
  sequentialNoOnEvent: HarnessFigures;
}

/**
 * An instance on the embedded runtime with the metered instant model, counting events when
 * `follow`, and `batch`, which times runs on it (section 6 reuses it as its in-process baseline).
 */
export function harness(settings: OverheadSettings, name: string, follow: boolean) {
  const workingDirectory = join(settings.dir, name);
  mkdirSync(workingDirectory, { recursive: true });
  const model = new MeteredModel(new InstantModel(settings.steps));
  const counts = { events: 0, passed: 0 };
  const pge = new PlannerGeneratorEvaluator({
    plannerAgent: model,
    generatorAgent: model,
    evaluatorAgent: model,
    workingDirectory,
    maxSteps: settings.steps,
    ...(follow
      ? {
          onEvent: (event: RunEvent) => {
            counts.events++;
            if (event.type === 'run.completed' && event.payload.passed) counts.passed++;
          },
        }
      : {}),
  });

  /** Runs `runs` runs, `concurrency` at a time; `eventsPerRun` stands in for the count without `onEvent`. */
  const batch = async (runs: number, concurrency: number, eventsPerRun = 0): Promise<HarnessFigures> => {
    model.reset();
    counts.events = 0;
    counts.passed = 0;
    let passed = 0;
    const time = await timed(() =>
      pool(runs, concurrency, async () => {
        await pge.run(TASK);
        if (pge.lastResult?.passed) passed++;
      }),
    );
    // A benchmark of runs that did not do what they should would measure the wrong thing.
    const expected = runs * callsPerRun(settings.steps);
    if (model.calls !== expected || (follow ? counts.passed : passed) !== runs) {
      throw new Error(
        `harness batch: ${model.calls} model calls (expected ${expected}), not every run passed`,
      );
    }
    const events = follow ? counts.events : eventsPerRun * runs;
    const figures = loopFigures({ runs, concurrency, calls: model.calls, modelMs: model.modelMs }, time);
    return { ...figures, events, eventsPerSecond: events / (time.wallMs / 1000) };
  };
  return { pge, batch };
}

/** Ratios to the bare loop of section 2b: the median of the ratios of batches run side by side. */
export interface PartsRatios {
  /** pge's run and step charts alone. */
  charts: number;
  /** A run's record alone (its events through the bus into the log on disk), per model call. */
  record: number;
  /** pge itself, in the same alternation. */
  pge: number;
}

/** Section 2b: two parts of pge timed alone (`parts.ts`), each beside the bare loop, sequentially. */
export interface PartsResults {
  charts: LoopFigures;
  record: LoopFigures;
  bare: LoopFigures;
  /** Of net µs per call. */
  overBare: PartsRatios;
  /** Of CPU µs per call. */
  cpuOverBare: PartsRatios;
}

/** Figures of sections 1-2: the pge harness, and the bare XState loop timed beside it. */
export interface OverheadResults {
  harness: HarnessResults;
  bare: { sequential: LoopFigures; concurrent: LoopFigures };
  /** pge's net µs per call over the bare loop's: the median of the ratios of batches run side by side. */
  pgeOverBare: { sequential: number; concurrent: number };
  parts: PartsResults;
}

/**
 * Measures the pge harness and the bare loop after a warm-up of each. Their batches alternate
 * (pge, bare, pge, bare …), so that a slow spell of a shared machine lands on a pair of batches
 * rather than on one loop's; each figure is the median of `reps` batches, and the ratio the median
 * of the pairs' ratios.
 */
export async function measureOverhead(settings: OverheadSettings): Promise<OverheadResults> {
  const followed = harness(settings, 'overhead', true);
  const plain = harness(settings, 'overhead-no-on-event', false);
  const bare = bareLoop(settings.steps);
  const { runs, reps, concurrency, warmupRuns } = settings;
  /** `reps` pairs of batches, pge's then the bare loop's: the median of each, and of the pairs' ratios. */
  const alternate = async (concurrent: number) => {
    const ours: HarnessFigures[] = [];
    const theirs: LoopFigures[] = [];
    const ratios: number[] = [];
    for (let i = 0; i < reps; i++) {
      ours.push(await followed.batch(runs, concurrent));
      theirs.push(await bare.batch(runs, concurrent));
      ratios.push(ours[i]!.usPerCall / theirs[i]!.usPerCall);
    }
    return { ours: medianOf(ours), theirs: medianOf(theirs), ratio: medianValue(ratios) };
  };
  try {
    for (const loop of [followed, bare]) {
      await loop.batch(warmupRuns, 1);
      await loop.batch(warmupRuns, concurrency);
    }
    await plain.batch(warmupRuns, 1);
    const sequential = await alternate(1);
    const concurrent = await alternate(concurrency);
    const eventsPerRun = sequential.ours.events / sequential.ours.runs;
    const sequentialNoOnEvent = await median(reps, () => plain.batch(runs, 1, eventsPerRun));
    const parts = await measureParts(settings, followed, bare);
    return {
      harness: { sequential: sequential.ours, concurrent: concurrent.ours, sequentialNoOnEvent },
      bare: { sequential: sequential.theirs, concurrent: concurrent.theirs },
      pgeOverBare: { sequential: sequential.ratio, concurrent: concurrent.ratio },
      parts,
    };
  } finally {
    await followed.pge.close();
    await plain.pge.close();
  }
}

/**
 * Section 2b: pge's charts alone and a run's record alone, each beside the bare loop, with pge
 * itself in the same alternation (charts, record, pge, bare, …); `followed` and `bare` are warm.
 * The record is that of one run of pge, made in a directory of its own.
 */
async function measureParts(
  settings: OverheadSettings,
  followed: ReturnType<typeof harness>,
  bare: ReturnType<typeof bareLoop>,
): Promise<PartsResults> {
  const { runs, reps, warmupRuns, steps } = settings;
  const source = harness(settings, 'parts-source', false);
  try {
    await source.batch(1, 1);
  } finally {
    await source.pge.close();
  }
  const events = eventsOfTheRunIn(join(settings.dir, 'parts-source'));
  const charts = chartsLoop(steps, TASK);
  const record = recordLoop(events, join(settings.dir, 'parts-record'), callsPerRun(steps));
  try {
    await charts.batch(warmupRuns);
    await record.batch(warmupRuns);
    const figures: Record<'charts' | 'record' | 'bare', LoopFigures[]> = { charts: [], record: [], bare: [] };
    const ratios: Record<keyof PartsRatios, number[]> = { charts: [], record: [], pge: [] };
    const cpuRatios: Record<keyof PartsRatios, number[]> = { charts: [], record: [], pge: [] };
    for (let i = 0; i < reps; i++) {
      const batches = {
        charts: await charts.batch(runs),
        record: await record.batch(runs),
        pge: await followed.batch(runs, 1),
      };
      const b = await bare.batch(runs, 1);
      figures.charts.push(batches.charts);
      figures.record.push(batches.record);
      figures.bare.push(b);
      for (const part of ['charts', 'record', 'pge'] as const) {
        ratios[part].push(batches[part].usPerCall / b.usPerCall);
        cpuRatios[part].push(batches[part].cpuUsPerCall / b.cpuUsPerCall);
      }
    }
    const medians = (values: Record<keyof PartsRatios, number[]>): PartsRatios => ({
      charts: medianValue(values.charts),
      record: medianValue(values.record),
      pge: medianValue(values.pge),
    });
    return {
      charts: medianOf(figures.charts),
      record: medianOf(figures.record),
      bare: medianOf(figures.bare),
      overBare: medians(ratios),
      cpuOverBare: medians(cpuRatios),
    };
  } finally {
    await record.close();
  }
}
