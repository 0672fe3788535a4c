import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { PlannerGeneratorEvaluator } from '../src/api/planner-generator-evaluator.js';
import type { Model, ModelAnswer, ModelRequest } from '../src/roles/model.js';
import { inputOf } from '../src/roles/prompts.js';
import { submitAndFollow } from '../src/runtime/services.js';
import type { ContractInput, EvaluationInput, Plan, Role, WorkInput } from '../src/schemas/index.js';
import { DelayedModel } from './delayed-model.js';
import {
  benchPlan,
  evaluationScoring,
  instantAnswer,
  proposalFor,
  reviewFor,
  workFor,
} from './instant-model.js';
import { medianValue } from './measure.js';
import { natsConnector, startBenchNatsServer, startDeployment } from './nats-deployment.js';
import { verdict } from './nats-report.js';

/**
 * Section 10: steps side by side (issue #34). A plan of two independent chains of two steps (s1
 * and s2 depend on nothing, s3 on s1, s4 on s2), every model call taking a fixed time, every
 * contract approved and every attempt passed at once: 1 + 4 × 4 = 17 calls a run. One step at a
 * time (`maxParallelSteps: 1`) waits for 17 call times; with the default (4) the two chains run
 * side by side and the run waits for 1 + 2 × 4 = 9. The wall time of whole runs, embedded and on
 * NATS, with one setting and the other alternating; the figure is parallel ÷ sequential.
 */

/** Settings of the section. */
export interface ParallelSettings {
  /** Root of the temporary logs. */
  dir: string;
  /** How long every model call takes. */
  delayMs: number;
  /** Runs of each setting per configuration, alternating; the medians are reported. */
  reps: number;
  /** Why the NATS configurations cannot run (no nats-server), or null. */
  natsMissing: string | null;
}

/** Figures of one configuration: the same runs one step at a time and side by side. */
export interface ParallelFigures {
  name: string;
  /** Wall time of a run with `maxParallelSteps: 1` (median). */
  sequentialMs: number;
  /** Wall time of a run with the default `maxParallelSteps` (median). */
  parallelMs: number;
  /** Median of the runs' parallel ÷ sequential, rep by rep. */
  ratio: number;
  /** The ratio with nothing but the model's time: call times a parallel run must wait ÷ 17. */
  floorRatio: number;
  /** Model calls of every run (checked: 17). */
  callsPerRun: number;
}

/** Results of the section. */
export interface ParallelResults {
  settings: Omit<ParallelSettings, 'dir' | 'natsMissing'>;
  configurations: ParallelFigures[];
  /** Why the NATS configurations were not measured, or null. */
  natsSkipped: string | null;
}

/** Target of issue #34 item 10: the two chains side by side take at most this share of the time. */
export const PARALLEL_TARGET = 0.6;

const TASK = 'Write two independent two-part notes (steps side by side benchmark)';
const STEPS = 4;
/** 1 plan + 4 steps × (proposal, review, work, evaluation). */
const CALLS_PER_RUN = 1 + 4 * STEPS;
/** Call times a run waits for with the chains side by side: the plan, then one chain's 2 × 4 calls. */
const PARALLEL_CALL_TIMES = 1 + 2 * 4;

/** The plan of the section: s1 and s2 independent, s3 after s1, s4 after s2. */
export function twoChainsPlan(): Plan {
  const plan = benchPlan(STEPS);
  return {
    ...plan,
    scope: 'Benchmark plan: two independent chains of two steps, each passing at once',
    steps: plan.steps.map((step, i) => ({ ...step, dependsOn: i < 2 ? [] : [plan.steps[i - 2]!.id] })),
  };
}

/** Answers at once, from the typed input: the two chains' plan, an approved contract, a pass (9s). */
class TwoChainsModel implements Model {
  readonly name = 'bench-two-chains (not an AI)';

  async complete(request: ModelRequest): Promise<ModelAnswer> {
    const input = inputOf(request.messages);
    const answers = {
      plan: () => twoChainsPlan(),
      contract: () => proposalFor(input as ContractInput),
      contract_review: () => reviewFor(),
      work: () => workFor(input as WorkInput),
      evaluation: () => evaluationScoring((input as EvaluationInput).criteria, 9),
    };
    return instantAnswer(this.name, answers[request.phase]());
  }
}

/** One run with `maxParallelSteps` (undefined: the default, 4): its wall time and model calls. */
type RunOnce = (maxParallelSteps: 1 | undefined) => Promise<{ wallMs: number; calls: number }>;

/** Alternates the two settings `reps` times (sequential first) and reduces the runs to figures. */
async function compare(
  name: string,
  settings: ParallelSettings,
  floorCallTimes: number,
  run: RunOnce,
): Promise<ParallelFigures> {
  const sequential: number[] = [];
  const parallel: number[] = [];
  const ratios: number[] = [];
  for (let i = 0; i < settings.reps; i++) {
    for (const [maxParallelSteps, times] of [
      [1, sequential],
      [undefined, parallel],
    ] as const) {
      const { wallMs, calls } = await run(maxParallelSteps);
      // Runs that did not make the scripted calls would time something else: stop instead.
      if (calls !== CALLS_PER_RUN)
        throw new Error(`steps side by side, ${name}: ${calls} model calls, expected ${CALLS_PER_RUN}`);
      times.push(wallMs);
    }
    ratios.push(parallel[i]! / sequential[i]!);
  }
  return {
    name,
    sequentialMs: medianValue(sequential),
    parallelMs: medianValue(parallel),
    ratio: medianValue(ratios),
    floorRatio: floorCallTimes / CALLS_PER_RUN,
    callsPerRun: CALLS_PER_RUN,
  };
}

/** Embedded: one instance per setting, every role on one delayed model (its workers take 16 calls at once). */
async function embedded(settings: ParallelSettings): Promise<ParallelFigures> {
  const workingDirectory = join(settings.dir, 'parallel-embedded');
  mkdirSync(workingDirectory, { recursive: true });
  const model = new DelayedModel(new TwoChainsModel(), settings.delayMs);
  const instances = new Map<1 | undefined, PlannerGeneratorEvaluator>();
  const instance = (maxParallelSteps: 1 | undefined) => {
    let pge = instances.get(maxParallelSteps);
    if (!pge) {
      pge = new PlannerGeneratorEvaluator({
        plannerAgent: model,
        generatorAgent: model,
        evaluatorAgent: model,
        workingDirectory,
        maxSteps: STEPS,
        ...(maxParallelSteps === undefined ? {} : { maxParallelSteps }),
      });
      instances.set(maxParallelSteps, pge);
    }
    return pge;
  };
  try {
    return await compare('embedded', settings, PARALLEL_CALL_TIMES, async (maxParallelSteps) => {
      const pge = instance(maxParallelSteps);
      const before = model.calls;
      const started = performance.now();
      await pge.run(TASK);
      const wallMs = performance.now() - started;
      if (!pge.lastResult?.passed) throw new Error('steps side by side, embedded: the run did not pass');
      return { wallMs, calls: model.calls - before };
    });
  } finally {
    await Promise.all([...instances.values()].map((pge) => pge.close()));
  }
}

/**
 * On NATS: a fresh nats-server, `workers` role workers per role, each taking one request at a
 * time, a coordinator, the persistence actor and a client, as `nats-deployment.ts` wires them.
 * Runs are submitted with `maxParallelSteps` as a submission's override.
 */
async function onNats(
  settings: ParallelSettings,
  name: string,
  workers: Readonly<Record<Role, number>>,
  floorCallTimes: number,
): Promise<ParallelFigures> {
  const dir = join(settings.dir, `parallel-nats-${workers.generator}-${workers.evaluator}`);
  mkdirSync(dir, { recursive: true });
  const server = await startBenchNatsServer(join(dir, 'nats-server.pid'));
  const errors: string[] = [];
  let figures: ParallelFigures;
  try {
    const deployment = await startDeployment({
      connect: natsConnector(server.url, errors),
      durablePersistence: true,
      workersPerRole: workers,
      concurrency: 1,
      model: () => new DelayedModel(new TwoChainsModel(), settings.delayMs),
      workingDirectory: dir,
      maxSteps: STEPS,
      maxRetriesPerStep: 0,
      errors,
    });
    try {
      figures = await compare(name, settings, floorCallTimes, async (maxParallelSteps) => {
        const started = performance.now();
        const { closing } = await submitAndFollow(
          deployment.client,
          {
            task: TASK,
            options: {
              maxSteps: STEPS,
              maxRetriesPerStep: 0,
              ...(maxParallelSteps === undefined ? {} : { maxParallelSteps }),
            },
          },
          () => {},
          { timeoutMs: 5_000 },
        );
        const last = await closing;
        const wallMs = performance.now() - started;
        if (last.type !== 'run.completed' || !last.payload.passed)
          throw new Error(`steps side by side, ${name}: run ${last.runId} ended ${last.type}`);
        return { wallMs, calls: last.payload.usage.calls };
      });
    } finally {
      await deployment.stop();
    }
  } finally {
    await server.stop();
  }
  if (errors.length > 0) throw new Error(`steps side by side, ${name}: ${errors.join('; ')}`);
  return figures;
}

/** The verdict against `PARALLEL_TARGET`: the worst configuration's ratio. */
export function parallelVerdict(results: ParallelResults) {
  const measured = Math.max(...results.configurations.map((c) => c.ratio));
  return { target: PARALLEL_TARGET, measured, pass: measured <= PARALLEL_TARGET };
}

/** Measures the embedded configuration and, with a nats-server, the two NATS ones. */
export async function measureParallelSteps(settings: ParallelSettings): Promise<ParallelResults> {
  const configurations = [await embedded(settings)];
  if (settings.natsMissing === null) {
    // One evaluator taking one call at a time: the chains' reviews and evaluations queue for it,
    // so the parallel run waits one call time more than the chains alone (10, not 9).
    configurations.push(
      await onNats(
        settings,
        'NATS: 1 planner, 2 generators, 1 evaluator',
        { planner: 1, generator: 2, evaluator: 1 },
        PARALLEL_CALL_TIMES + 1,
      ),
      await onNats(
        settings,
        'NATS: 1 planner, 2 generators, 2 evaluators',
        { planner: 1, generator: 2, evaluator: 2 },
        PARALLEL_CALL_TIMES,
      ),
    );
  }
  return {
    settings: { delayMs: settings.delayMs, reps: settings.reps },
    configurations,
    natsSkipped: settings.natsMissing,
  };
}

/** The section's lines in the report. */
export function parallelStepsLines(
  results: ParallelResults,
  table: (header: readonly string[], rows: readonly (readonly string[])[]) => string,
): string[] {
  const { delayMs, reps } = results.settings;
  const { measured, pass } = parallelVerdict(results);
  return [
    `10. Steps side by side (two independent chains of two steps, s3 after s1, s4 after s2; every`,
    `    model call ${delayMs} ms, every step passing at once: ${CALLS_PER_RUN} calls a run; the default`,
    `    --parallel 4 against --parallel 1, ${reps} runs of each alternating, medians; NATS workers take`,
    '    one call at a time)',
    table(
      ['configuration', '--parallel 1 ms', 'default ms', 'parallel ÷ sequential', 'model-time floor'],
      results.configurations.map((c) => [
        c.name,
        c.sequentialMs.toFixed(0),
        c.parallelMs.toFixed(0),
        `${c.ratio.toFixed(2)}×`,
        `${c.floorRatio.toFixed(2)}×`,
      ]),
    ),
    ...(results.natsSkipped === null ? [] : [`NATS configurations skipped: ${results.natsSkipped}`]),
    `target ≤ ${PARALLEL_TARGET}×: ${verdict(pass)} (worst ${measured.toFixed(2)}×)`,
    '',
  ];
}
