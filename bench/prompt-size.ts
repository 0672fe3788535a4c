import { mkdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { PlannerGeneratorEvaluator } from '../src/api/planner-generator-evaluator.js';
import { inputOf } from '../src/roles/prompts.js';
import { InstantModel } from './instant-model.js';
import { MeteredModel, promptChars } from './metered-model.js';

/**
 * Section 3: prompt size against steps already run. Each role call is built from its typed input
 * only, so a call at step 200 should be the size of one at step 10. Runs plans of 10, 50 and 200
 * steps and records the size (characters of all messages) of every work and evaluation call.
 * The reference instead re-sends the whole shared-state log, whose size is reported alongside.
 */

/** The calls whose size is recorded, by step. */
export interface StepPromptSizes {
  step: number;
  /** Work, first attempt. */
  work: number;
  /** Work, second attempt (with the retry context: signal, scores, feedback). */
  retryWork: number;
  /** Evaluation, first attempt. */
  evaluation: number;
}

/** Figures of one plan length. */
export interface PlanPromptFigures {
  planSteps: number;
  /** Size of the calls at steps 10, 50 and 200 of this plan (those it has). */
  atSteps: StepPromptSizes[];
  /** Bytes of the run's whole markdown log: what the reference would re-send at the plan's end. */
  logBytes: number;
}

/** Steps whose calls are reported. */
export const REPORTED_STEPS = [10, 50, 200] as const;
const PLANS = [10, 50, 200] as const;

/** Runs one plan of `planSteps` steps and collects its prompt sizes and log size. */
async function measurePlan(dir: string, planSteps: number): Promise<PlanPromptFigures> {
  const workingDirectory = join(dir, `prompts-${planSteps}`);
  mkdirSync(workingDirectory, { recursive: true });
  const sizes = new Map<string, number>();
  const model = new MeteredModel(new InstantModel(planSteps), {
    onRequest: (request) => {
      if (request.phase !== 'work' && request.phase !== 'evaluation') return;
      const input = inputOf(request.messages) as { stepNumber: number; attempt: number };
      sizes.set(`${request.phase}:${input.stepNumber}:${input.attempt}`, promptChars(request));
    },
  });
  const pge = new PlannerGeneratorEvaluator({
    plannerAgent: model,
    generatorAgent: model,
    evaluatorAgent: model,
    workingDirectory,
    maxSteps: 200,
  });
  try {
    await pge.run(`Write a ${planSteps}-part technical document (benchmark task)`);
  } finally {
    await pge.close();
  }
  const result = pge.lastResult;
  if (!result?.passed || result.totalStepsCompleted !== planSteps)
    throw new Error(`prompt-size run of ${planSteps} steps did not pass: ${result?.summary}`);
  const size = (key: string): number => {
    const value = sizes.get(key);
    if (value === undefined) throw new Error(`no ${key} call was recorded`);
    return value;
  };
  return {
    planSteps,
    atSteps: REPORTED_STEPS.filter((step) => step <= planSteps).map((step) => ({
      step,
      work: size(`work:${step}:1`),
      retryWork: size(`work:${step}:2`),
      evaluation: size(`evaluation:${step}:1`),
    })),
    logBytes: statSync(result.outputPath).size,
  };
}

/** Prompt sizes and log sizes for plans of 10, 50 and 200 steps. */
export async function measurePromptSizes(dir: string): Promise<PlanPromptFigures[]> {
  const figures: PlanPromptFigures[] = [];
  for (const steps of PLANS) figures.push(await measurePlan(dir, steps));
  return figures;
}
