import { describe, expect, it } from 'vitest';
import { carriedOutcomes } from '../../src/machines/run-context.js';
import {
  type AttemptRecord,
  type CarriedStep,
  documentOfPlan,
  type GivenPlan,
  type RunContinuation,
} from '../../src/schemas/index.js';
import { makePlan, runChart, scored, types } from '../support/chart-fixtures.js';

/**
 * Plans as files in the run chart (issue #36): a given plan is taken with no planner call
 * (`planGiven`), and the steps kept from the run a job continues are skipped and recorded
 * (`readyStepCarried`), their artifacts going to their dependents.
 */

/** s1 → s2 → s3, the chart fixtures' chain. */
const plan = makePlan(['s1', 's2', 's3']);
const given: GivenPlan = { document: documentOfPlan(plan), file: '/jobs/plan.json' };

const keptAttempt: AttemptRecord = {
  attempt: 2,
  signal: 'refine',
  work: { output: 'kept work of s1', notes: '', selfAssessment: [] },
  evaluation: scored(9, 9),
  problem: null,
  verdict: 'pass',
  reason: 'all_criteria_pass',
  scores: [],
  weightedMean: 9,
};
const kept: CarriedStep = {
  stepId: 's1',
  title: 'Step s1',
  runId: 'run-1',
  contract: null,
  attempt: keptAttempt,
};
const continues: RunContinuation = { runId: 'run-1', logPath: '/jobs/run-1.md', carried: [kept] };

describe('a given plan', () => {
  it('is taken with no planner call, and plan.created says it was given', async () => {
    const run = await runChart({ evaluations: [scored(9, 9), scored(9, 9), scored(9, 9)] }, { plan: given });
    expect(run.inputs.plan).toEqual([]);
    expect(run.events[0]).toEqual({
      type: 'plan.created',
      payload: {
        plan: { ...plan, steps: plan.steps.map((s) => ({ ...s })) },
        criteria: [
          { ...plan.criteria[0]!, threshold: 7 },
          { ...plan.criteria[1]!, threshold: 6 },
        ],
        replan: 0,
        given: { file: '/jobs/plan.json' },
      },
    });
    expect(run.outcome.status).toBe('completed');
    // Four calls a step (proposal, review, work, evaluation), none for the plan.
    expect(run.outcome.totals.usage.calls).toBe(12);
  });

  it('goes to the planner on a replan, with the given plan as the previous one', async () => {
    const run = await runChart(
      {
        plans: [makePlan(['r1'])],
        evaluations: [scored(2, 2, ['no'], 'plan'), scored(9, 9)],
      },
      { plan: given, onStepExhausted: 'replan', maxRetriesPerStep: 0 },
    );
    expect(run.inputs.plan).toHaveLength(1);
    expect(run.inputs.plan[0]!.replan?.previousPlan.steps.map((s) => s.id)).toEqual(['s1', 's2', 's3']);
    const created = run.events.filter((e) => e.type === 'plan.created');
    expect(created.map((e) => (e.payload as { given?: unknown }).given)).toEqual([
      { file: '/jobs/plan.json' },
      undefined,
    ]);
  });
});

describe('kept steps', () => {
  it('are skipped and recorded, and their dependents receive their artifacts', async () => {
    const run = await runChart(
      { evaluations: [scored(9, 9), scored(9, 9)] },
      { plan: given, continues, maxParallelSteps: 1 },
    );
    expect(types(run.events).slice(0, 3)).toEqual(['plan.created', 'step.carried', 'step.started']);
    expect(run.events[1]).toEqual({
      type: 'step.carried',
      payload: { stepId: 's1', stepNumber: 1, title: 'Step s1', fromRunId: 'run-1' },
    });
    // Only s2 and s3 run; s2 is given the artifact s1 kept.
    expect(run.inputs.work.map((w) => w.step.id)).toEqual(['s2', 's3']);
    expect(run.inputs.work[0]!.dependencies).toEqual([
      { stepId: 's1', title: 'Step s1', output: 'kept work of s1' },
    ]);
    expect(run.outcome.status).toBe('completed');
    expect(run.outcome.totals).toMatchObject({
      passed: true,
      stepsPassed: 3,
      stepsTotal: 3,
      totalRetries: 0,
    });
    expect(run.outcome.outcomes.map((o) => [o.stepId, o.carriedFrom])).toEqual([
      ['s1', 'run-1'],
      ['s2', undefined],
      ['s3', undefined],
    ]);
  });

  it('start as passed outcomes on their kept attempt, numbered by the given plan, with no spend', () => {
    const budget = {
      budgets: { maxCostUsd: null, maxTokens: null, maxDurationMs: null },
      spent: { promptTokens: 0, completionTokens: 0, costUsd: 0, calls: 0 },
      startedAt: 0,
      clock: 0,
    };
    const keptS3 = { ...kept, stepId: 's3', title: 'Step s3' };
    const [outcome, third] = carriedOutcomes(
      { plan: given, continues: { ...continues, carried: [kept, keptS3] } } as Parameters<
        typeof carriedOutcomes
      >[0],
      budget,
    );
    expect(outcome).toMatchObject({
      status: 'passed',
      stepNumber: 1,
      best: 0,
      attempts: [keptAttempt],
      carriedFrom: 'run-1',
    });
    expect(outcome!.usage.calls).toBe(0);
    expect(third!.stepNumber).toBe(3);
  });
});
