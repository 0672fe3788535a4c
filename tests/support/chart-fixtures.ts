import { createActor, fromPromise, toPromise } from 'xstate';
import type { RunSpec } from '../../src/conductor/run-spec.js';
import type { RunInput, RunOutcome } from '../../src/machines/run-machine.js';
import { runMachine } from '../../src/machines/run-machine.js';
import { stepMachine } from '../../src/machines/step-machine.js';
import type {
  ContractInput,
  ContractReviewInput,
  EvaluateOutput,
  EvaluationInput,
  PlanInput,
  RecordParams,
  WorkInput,
  WorkOutput,
} from '../../src/machines/types.js';
import type {
  ContractReview,
  Evaluation,
  FailureKind,
  Plan,
  Usage,
  ValidatorRun,
} from '../../src/schemas/index.js';

/** Test fixtures for the statecharts: fake role calls fed from scripts, plugged in with `provide`. */

export const CALL_USAGE: Usage = { promptTokens: 100, completionTokens: 50, costUsd: 0.01, calls: 1 };

export function makePlan(stepIds: string[] = ['s1'], thresholds: (number | null)[] = [7, 6]): Plan {
  return {
    scope: 'write a short guide',
    steps: stepIds.map((id, i) => ({
      id,
      title: `Step ${id}`,
      description: `do ${id}`,
      expectedOutput: `${id} done`,
      dependsOn: i > 0 ? [stepIds[i - 1]!] : [],
    })),
    criteria: [
      { name: 'accuracy', weight: 'high', description: 'facts right', threshold: thresholds[0] ?? null },
      { name: 'clarity', weight: 'standard', description: 'easy to read', threshold: thresholds[1] ?? null },
    ],
  };
}

export const APPROVED: ContractReview = { status: 'approved', amendments: [], rationale: 'testable' };
export const amend = (...amendments: string[]): ContractReview => ({
  status: 'amendments_required',
  amendments,
  rationale: 'needs work',
});

/** An evaluation with the given scores for accuracy and clarity, and where the fault of a failure lies. */
export function scored(
  accuracy: number,
  clarity: number,
  feedback = [`raise accuracy from ${accuracy}`],
  failureKind: FailureKind | null = null,
): Evaluation {
  return {
    scores: [
      { criterion: 'accuracy', score: accuracy, evidence: 'e1' },
      { criterion: 'clarity', score: clarity, evidence: 'e2' },
    ],
    findings: [`accuracy at ${accuracy}`],
    actionableFeedback: feedback,
    summary: 'ok',
    failureKind,
  };
}

/** What each fake actor answers, in order; an Error is thrown, `null` is an invalid answer. */
export interface ChartScript {
  plans?: (Plan | Error)[];
  reviews?: (ContractReview | Error)[];
  works?: (string | null | Error)[];
  /** What the validators made of each valid work, in order (default none ran: null). */
  validations?: ValidatorRun[][];
  evaluations?: (Evaluation | null | Error)[];
  /** Cost of every call (default 0.01 USD). */
  usage?: Usage;
  /** Milliseconds each call advances the fake clock (default 1000). */
  msPerCall?: number;
}

export interface ChartRun {
  outcome: RunOutcome;
  events: RecordParams[];
  inputs: {
    plan: PlanInput[];
    contract: ContractInput[];
    review: ContractReviewInput[];
    work: WorkInput[];
    evaluation: EvaluationInput[];
  };
}

export function runInput(overrides: Partial<RunInput> = {}): RunInput {
  return {
    task: 'Write a guide to intermittent fasting',
    logPath: '/tmp/pge-test.md',
    maxSteps: 10,
    maxRetriesPerStep: 3,
    maxContractRounds: 3,
    onStepExhausted: 'advance',
    maxReplans: 1,
    defaultThresholds: {},
    fallbackThreshold: 6,
    budgets: { maxCostUsd: null, maxTokens: null, maxDurationMs: null },
    callTimeoutMs: 30 * 60_000,
    maxParallelSteps: 4,
    models: { planner: 'scripted', generator: 'scripted', evaluator: 'scripted' },
    startedAt: 1_000_000,
    ...overrides,
  };
}

/** A coordinator's run of `runInput`'s settings, with scripted models and no log of its own. */
export function runSpec(runId: string): RunSpec {
  const {
    startedAt: _,
    task,
    logPath,
    continues: __,
    ...settings
  } = runInput({
    logPath: `/nonexistent/pge_shared_state_${runId}.md`,
  });
  return { runId, task, logPath, settings: { ...settings, callTimeoutMs: 60_000 } };
}

function take<T>(queue: T[] | undefined, what: string): T {
  const next = queue?.shift();
  if (next === undefined) throw new Error(`script has no more ${what}`);
  return next;
}

/** Runs the run machine to its end with scripted fake actors and returns what happened. */
export async function runChart(script: ChartScript, overrides: Partial<RunInput> = {}): Promise<ChartRun> {
  const events: RecordParams[] = [];
  const inputs: ChartRun['inputs'] = { plan: [], contract: [], review: [], work: [], evaluation: [] };
  const usage = script.usage ?? CALL_USAGE;
  let clock = overrides.startedAt ?? 1_000_000;
  const report = () => {
    clock += script.msPerCall ?? 1000;
    return { usage, finishedAt: clock };
  };
  const plans = [...(script.plans ?? [makePlan()])];
  const record = (_: unknown, params: RecordParams) => {
    events.push(params);
  };
  const steps = stepMachine.provide({
    actions: { record },
    actors: {
      proposeContract: fromPromise(async ({ input }: { input: ContractInput }) => {
        inputs.contract.push(input);
        return {
          proposal: {
            title: `${input.step.title} contract r${input.round}`,
            acceptanceCriteria: ['covers the basics'],
            expectedOutput: input.step.expectedOutput,
            verificationMethod: 'read it',
          },
          ...report(),
        };
      }),
      reviewContract: fromPromise(async ({ input }: { input: ContractReviewInput }) => {
        inputs.review.push(input);
        const review = script.reviews?.length ? take(script.reviews, 'reviews') : APPROVED;
        if (review instanceof Error) throw review;
        return { review, ...report() };
      }),
      doWork: fromPromise(async ({ input }: { input: WorkInput }): Promise<WorkOutput> => {
        inputs.work.push(input);
        const output = script.works?.length
          ? take(script.works, 'works')
          : `work of ${input.step.id} attempt ${input.attempt}`;
        if (output instanceof Error) throw output;
        return output === null
          ? { work: null, problem: 'work answer never validated', validation: null, ...report() }
          : {
              work: {
                output,
                notes: 'secret notes',
                selfAssessment: [{ criterion: 'accuracy', score: 9, comment: 'great' }],
              },
              problem: null,
              validation: script.validations?.shift() ?? null,
              ...report(),
            };
      }),
      evaluateWork: fromPromise(async ({ input }: { input: EvaluationInput }): Promise<EvaluateOutput> => {
        inputs.evaluation.push(input);
        const evaluation = take(script.evaluations, 'evaluations');
        if (evaluation instanceof Error) throw evaluation;
        return evaluation === null
          ? { evaluation: null, problem: 'criterion "clarity" has no score', ...report() }
          : { evaluation, problem: null, ...report() };
      }),
    },
  });
  const machine = runMachine.provide({
    actions: { record },
    actors: {
      runStep: steps,
      plan: fromPromise(async ({ input }: { input: PlanInput }) => {
        inputs.plan.push(input);
        const plan = take(plans, 'plans');
        if (plan instanceof Error) throw plan;
        return { plan, ...report() };
      }),
    },
  });
  const actor = createActor(machine, { input: runInput(overrides) });
  actor.start();
  const outcome = await toPromise(actor);
  return { outcome, events, inputs };
}

/** Event types in order, for asserting the chart's path. */
export const types = (events: RecordParams[]) => events.map((e) => e.type);
