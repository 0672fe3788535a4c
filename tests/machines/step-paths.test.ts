import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, toPromise } from 'xstate';
import { runMachine } from '../../src/machines/run-machine.js';
import type {
  ApprovalInput,
  ApprovalOutput,
  PlanInput,
  PlanOutput,
  RecordParams,
} from '../../src/machines/types.js';
import { amend, CALL_USAGE, makePlan, runChart, runInput, scored, types } from '../support/chart-fixtures.js';

/** What a fake call reports besides its answer. */
const CALL_REPORT = { usage: CALL_USAGE, finishedAt: 1_001_000 };

/** Every path of the step chart, driven through the run chart with scripted actors. */

describe('step chart paths', () => {
  it('passes first time: one contract round, one attempt, run passed', async () => {
    const { outcome, events, inputs } = await runChart({ evaluations: [scored(8, 7)] });
    expect(outcome.status).toBe('completed');
    expect(outcome.totals).toMatchObject({ passed: true, stepsPassed: 1, stepsTotal: 1, totalRetries: 0 });
    expect(inputs.work).toHaveLength(1);
    expect(inputs.evaluation).toHaveLength(1);
    expect(types(events)).toEqual([
      'plan.created',
      'step.started',
      'step.contract.agreed',
      'step.attempt.judged',
      'step.passed',
      'run.completed',
    ]);
    expect(outcome.outcomes[0]!.contract).toMatchObject({ rounds: 1, imposed: false });
  });

  it('refines after the first failure and passes on the 3rd attempt with exact counts', async () => {
    const { outcome, events, inputs } = await runChart({
      evaluations: [scored(4, 5), scored(6, 6), scored(8, 7)],
    });
    expect(inputs.work).toHaveLength(3);
    expect(inputs.evaluation).toHaveLength(3);
    expect(outcome.totals.totalRetries).toBe(2);
    expect(outcome.totals.passed).toBe(true);
    const retries = events.filter((e) => e.type === 'step.retry.scheduled');
    expect(retries.map((e) => e.payload)).toMatchObject([
      { nextAttempt: 2, signal: 'refine' },
      { nextAttempt: 3, signal: 'refine' },
    ]);
    const second = inputs.work[1]!.retry!;
    expect(second.signal).toBe('refine');
    expect(second.feedback).toEqual(['raise accuracy from 4']);
    expect(second.scores).toEqual([
      { criterion: 'accuracy', score: 4, threshold: 7, delta: null },
      { criterion: 'clarity', score: 5, threshold: 6, delta: null },
    ]);
    const third = inputs.work[2]!.retry!;
    expect(third.scores.map((s) => s.delta)).toEqual([2, 1]);
    expect(inputs.work[0]!.retry).toBeNull();
    expect(outcome.outcomes[0]!.attempts.map((a) => a.signal)).toEqual(['initial', 'refine', 'refine']);
  });

  it('pivots when the weighted mean is flat or falling', async () => {
    // means: (5*2+5)/3=5, (4*2+7)/3=5 (flat) → pivot, then (3*2+3)/3=3 (falling) → pivot
    const { events, inputs, outcome } = await runChart({
      evaluations: [scored(5, 5), scored(4, 7), scored(3, 3), scored(3, 3)],
    });
    const signals = events.filter((e) => e.type === 'step.retry.scheduled').map((e) => e.payload.signal);
    expect(signals).toEqual(['refine', 'pivot', 'pivot']);
    expect(inputs.work[2]!.retry!.signal).toBe('pivot');
    expect(outcome.outcomes[0]!.status).toBe('exhausted');
  });

  it('judges work a validator failed without asking the evaluator, and retries with the validator output', async () => {
    const failing = {
      validator: 'npm test',
      passed: false,
      exitCode: 1,
      output: '1 test failed',
      durationMs: 5,
    };
    const passing = { ...failing, passed: true, exitCode: 0, output: 'ok' };
    const { outcome, events, inputs } = await runChart({
      validations: [[passing, failing], [passing]],
      evaluations: [scored(8, 7)],
    });
    expect(inputs.work).toHaveLength(2);
    // The evaluator saw only the attempt every validator passed.
    expect(inputs.evaluation.map((e) => e.attempt)).toEqual([2]);
    const judged = events.filter((e) => e.type === 'step.attempt.judged').map((e) => e.payload);
    expect(judged).toMatchObject([
      { attempt: 1, verdict: 'fail', reason: 'failed_validation', weightedMean: null },
      { attempt: 2, verdict: 'pass', reason: 'all_criteria_pass' },
    ]);
    const retry = inputs.work[1]!.retry!;
    expect(retry.signal).toBe('refine');
    expect(retry.feedback).toEqual(['validator "npm test" failed with exit code 1:\n1 test failed']);
    expect(outcome.outcomes[0]!.attempts[0]!.problem).toBe(retry.feedback[0]);
    expect(outcome.totals.passed).toBe(true);
  });

  it('negotiates amendments, then approval: the revised proposal sees the amendments', async () => {
    const { outcome, events, inputs } = await runChart({
      reviews: [amend('add a verification checklist')],
      evaluations: [scored(9, 9)],
    });
    expect(inputs.contract).toHaveLength(2);
    expect(inputs.review).toHaveLength(2);
    expect(inputs.contract[1]!.previous!.amendments).toEqual(['add a verification checklist']);
    expect(inputs.contract[1]!.round).toBe(2);
    expect(outcome.outcomes[0]!.contract).toMatchObject({ rounds: 2, imposed: false });
    expect(types(events)).toContain('step.contract.agreed');
    expect(types(events)).not.toContain('step.contract.imposed');
  });

  it('imposes the contract at the round bound with the outstanding amendments added', async () => {
    const { outcome, events, inputs } = await runChart(
      { reviews: [amend('a1'), amend('a2')], evaluations: [scored(9, 9)] },
      { maxContractRounds: 2 },
    );
    expect(inputs.contract).toHaveLength(2);
    const imposed = events.find((e) => e.type === 'step.contract.imposed');
    expect(imposed?.payload).toMatchObject({ outstandingAmendments: ['a2'] });
    expect(outcome.outcomes[0]!.contract).toMatchObject({
      rounds: 2,
      imposed: true,
      acceptanceCriteria: ['covers the basics', 'a2'],
    });
    // The imposed contract binds every attempt.
    expect(inputs.work[0]!.contract.imposed).toBe(true);
    expect(inputs.evaluation[0]!.contract.acceptanceCriteria).toContain('a2');
  });

  it('counts an invalid evaluation as a failed attempt and never passes it', async () => {
    const { outcome, events, inputs } = await runChart({ evaluations: [null, scored(9, 9)] });
    const judged = events.filter((e) => e.type === 'step.attempt.judged').map((e) => e.payload);
    expect(judged[0]).toMatchObject({ verdict: 'fail', reason: 'invalid_evaluation', weightedMean: null });
    expect(judged[0]!.scores.every((s) => s.score === null && !s.passed)).toBe(true);
    // The generator learns that the evaluation was unreadable, never what the evaluator wrote.
    expect(inputs.work[1]!.retry!.invalidEvaluation).toMatch(/could not be read/);
    expect(inputs.work[1]!.retry!.invalidEvaluation).not.toContain('clarity');
    expect(outcome.totals.passed).toBe(true);
  });

  it('fails an attempt whose work never validated without calling the evaluator', async () => {
    const { events, inputs } = await runChart({ works: [null, 'good work'], evaluations: [scored(9, 9)] });
    expect(inputs.evaluation).toHaveLength(1);
    expect(inputs.evaluation[0]!.artifact).toBe('good work');
    const judged = events.filter((e) => e.type === 'step.attempt.judged').map((e) => e.payload);
    expect(judged.map((j) => j.reason)).toEqual(['invalid_work', 'all_criteria_pass']);
  });

  it('a score equal to the threshold passes; one below fails', async () => {
    const equal = await runChart({ evaluations: [scored(7, 6)] });
    expect(equal.outcome.totals.passed).toBe(true);
    const below = await runChart({ evaluations: [scored(7, 5.9)] }, { maxRetriesPerStep: 0 });
    expect(below.outcome.totals.passed).toBe(false);
  });
});

describe('exhaustion policies', () => {
  const twoSteps = () => makePlan(['s1', 's2']);
  const failing = [scored(3, 3), scored(5, 5), scored(4, 4)];

  it('advance: the step fails, keeps its best attempt, and the run goes on', async () => {
    const { outcome, events, inputs } = await runChart(
      { plans: [twoSteps()], works: ['w1', 'w2-best', 'w3'], evaluations: [...failing, scored(9, 9)] },
      { maxRetriesPerStep: 2 },
    );
    expect(outcome.status).toBe('completed');
    expect(outcome.totals).toMatchObject({ passed: false, stepsPassed: 1, stepsTotal: 2, totalRetries: 2 });
    const first = outcome.outcomes[0]!;
    expect(first.status).toBe('exhausted');
    expect(first.best).toBe(1);
    expect(first.attempts[first.best]!.work!.output).toBe('w2-best');
    expect(events.find((e) => e.type === 'step.failed')?.payload).toMatchObject({
      attempts: 3,
      bestAttempt: 2,
      policy: 'advance',
    });
    // The dependent step receives the failed step's best artifact.
    expect(inputs.work[3]!.dependencies).toEqual([{ stepId: 's1', title: 'Step s1', output: 'w2-best' }]);
  });

  it('abort: the run fails and later steps never run', async () => {
    const { outcome, events, inputs } = await runChart(
      { plans: [twoSteps()], evaluations: [...failing] },
      { maxRetriesPerStep: 2, onStepExhausted: 'abort' },
    );
    expect(outcome.status).toBe('aborted');
    expect(inputs.contract.map((c) => c.step.id)).toEqual(['s1']);
    const last = events.at(-1)!;
    expect(last.type).toBe('run.failed');
    expect(last.payload).toMatchObject({ reason: 'aborted', passed: false });
  });

  it('replan: the planner gets the findings, passed steps are not re-run, and replans are bounded', async () => {
    const plan = makePlan(['s1', 's2']);
    const replanned = makePlan(['s1', 's2b']);
    const { outcome, inputs, events } = await runChart(
      {
        plans: [plan, replanned],
        // s1 passes; s2 exhausts (2 attempts); after the replan s2b exhausts again → maxReplans 1 → advance.
        evaluations: [scored(9, 9), scored(2, 2), scored(3, 3), scored(2, 2), scored(2, 2)],
      },
      { maxRetriesPerStep: 1, onStepExhausted: 'replan', maxReplans: 1 },
    );
    expect(inputs.plan).toHaveLength(2);
    expect(inputs.plan[1]!.replan).toMatchObject({
      failedStepId: 's2',
      completedStepIds: ['s1'],
      findings: ['accuracy at 3'],
    });
    expect(inputs.contract.map((c) => c.step.id)).toEqual(['s1', 's2', 's2b']);
    expect(outcome.replans).toBe(1);
    expect(outcome.status).toBe('completed');
    expect(outcome.totals).toMatchObject({ passed: false, stepsPassed: 1, stepsTotal: 2 });
    expect(events.filter((e) => e.type === 'plan.created').map((e) => e.payload.replan)).toEqual([0, 1]);
    // The second exhaustion found the replan budget spent: the log says the run advanced.
    expect(events.filter((e) => e.type === 'step.failed').map((e) => e.payload.policy)).toEqual([
      'replan',
      'advance',
    ]);
  });

  it("routes a failure the evaluator finds to be the plan's to the planner at once, retries left or not, with its findings", async () => {
    const plan = makePlan(['s1', 's2']);
    const replanned = makePlan(['s1', 's2b']);
    const { outcome, inputs, events } = await runChart(
      {
        plans: [plan, replanned],
        // s1 passes; s2's first attempt fails by the plan's fault; s2b passes.
        evaluations: [scored(9, 9), scored(3, 4, ['s2 needs data no step gathers'], 'plan'), scored(8, 8)],
      },
      // The default policy (advance) and retries left: neither holds back the replan.
      { maxRetriesPerStep: 3, onStepExhausted: 'advance', maxReplans: 1 },
    );
    expect(inputs.work.map((w) => [w.step.id, w.attempt])).toEqual([
      ['s1', 1],
      ['s2', 1],
      ['s2b', 1],
    ]);
    expect(inputs.plan[1]!.replan).toMatchObject({
      reason: 'plan_rejected',
      failedStepId: 's2',
      completedStepIds: ['s1'],
      findings: ['accuracy at 3'],
      actionableFeedback: ['s2 needs data no step gathers'],
    });
    expect(types(events).slice(5, 9)).toEqual([
      'step.started',
      'step.contract.agreed',
      'step.attempt.judged',
      'step.plan.rejected',
    ]);
    expect(events.find((e) => e.type === 'step.plan.rejected')?.payload).toEqual({
      stepId: 's2',
      stepNumber: 2,
      attempt: 1,
    });
    expect(outcome.replans).toBe(1);
    expect(outcome.totals).toMatchObject({ passed: true, stepsPassed: 2, stepsTotal: 2 });
  });

  it("retries a failure found to be the plan's like any other once the replans are spent", async () => {
    const { outcome, inputs, events } = await runChart(
      { evaluations: [scored(3, 4, ['x'], 'plan'), scored(8, 8)] },
      { maxReplans: 0 },
    );
    expect(inputs.plan).toHaveLength(1);
    expect(inputs.work).toHaveLength(2);
    expect(types(events)).not.toContain('step.plan.rejected');
    expect(outcome.totals.passed).toBe(true);
  });
});

describe('budgets, errors and interruption', () => {
  it('stops before the call that would break maxCostUsd, with a log line that says why', async () => {
    // Each call costs 0.01; with a 0.035 cap, the 4th call (estimate 0.01 on 0.03) is never made.
    const { outcome, inputs, events } = await runChart(
      { evaluations: [scored(9, 9)] },
      { budgets: { maxCostUsd: 0.035, maxTokens: null, maxDurationMs: null } },
    );
    const calls =
      inputs.plan.length +
      inputs.contract.length +
      inputs.review.length +
      inputs.work.length +
      inputs.evaluation.length;
    expect(calls).toBe(3);
    expect(outcome.status).toBe('stopped');
    expect(outcome.stoppedBy).toBe('maxCostUsd');
    const last = events.at(-1)!;
    expect(last).toMatchObject({ type: 'run.failed', payload: { reason: 'budget' } });
    expect(last.type === 'run.failed' && last.payload.message).toMatch(/maxCostUsd/);
  });

  it('checks the budget before the first call of a step', async () => {
    // The plan costs 150 tokens; reserving another 150 would pass 200, so no contract is proposed.
    const { outcome, inputs } = await runChart(
      { evaluations: [scored(9, 9)] },
      { budgets: { maxCostUsd: null, maxTokens: 200, maxDurationMs: null } },
    );
    expect(inputs.plan).toHaveLength(1);
    expect(inputs.contract).toHaveLength(0);
    expect(outcome).toMatchObject({ status: 'stopped', stoppedBy: 'maxTokens' });
  });

  it('does not turn a passing last affordable attempt into a budget stop', async () => {
    // 5 calls at 0.01 each; the cap allows exactly them, and the step passes on the 5th.
    const { outcome } = await runChart(
      { evaluations: [scored(9, 9)] },
      { budgets: { maxCostUsd: 0.05, maxTokens: null, maxDurationMs: null } },
    );
    expect(outcome.status).toBe('completed');
    expect(outcome.totals.passed).toBe(true);
  });

  it('stops on maxTokens and on maxDurationMs', async () => {
    const tokens = await runChart(
      { evaluations: [scored(9, 9)] },
      { budgets: { maxCostUsd: null, maxTokens: 500, maxDurationMs: null } },
    );
    expect(tokens.outcome.stoppedBy).toBe('maxTokens');
    expect(tokens.inputs.work).toHaveLength(0);
    const time = await runChart(
      { evaluations: [scored(9, 9)], msPerCall: 10_000 },
      { budgets: { maxCostUsd: null, maxTokens: null, maxDurationMs: 35_000 } },
    );
    expect(time.outcome.stoppedBy).toBe('maxDurationMs');
    expect(time.inputs.work).toHaveLength(1);
    expect(time.inputs.evaluation).toHaveLength(0);
  });

  it('fails the run when a role actor errors', async () => {
    const boom = Object.assign(new Error('server said 401'), { name: 'ModelRequestError', retryable: false });
    const { outcome, events } = await runChart({ reviews: [boom] });
    expect(outcome.status).toBe('failed');
    expect(outcome.error).toEqual({
      name: 'ModelRequestError',
      message: 'server said 401',
      retryable: false,
    });
    expect(events.at(-1)).toMatchObject({ type: 'run.failed', payload: { reason: 'error' } });
  });

  it('fails the run when planning errors', async () => {
    const { outcome } = await runChart({ plans: [new Error('no plan')] });
    expect(outcome.status).toBe('failed');
    expect(outcome.plan).toBeNull();
  });
});

describe('interruption', () => {
  it('an interrupt event ends the run as interrupted with a closing event', () => {
    const events: string[] = [];
    const machine = runMachine.provide({
      // A planner that never answers: the run waits in planning until the interrupt.
      actors: { plan: fromPromise<PlanOutput, PlanInput>(() => new Promise(() => {})) },
      actions: {
        record: (_, p: { type: string }) => {
          events.push(p.type);
        },
      },
    });
    const actor = createActor(machine, { input: runInput() }).start();
    actor.send({ type: 'interrupt' });
    expect(actor.getSnapshot().status).toBe('done');
    expect(actor.getSnapshot().output?.status).toBe('interrupted');
    expect(events).toEqual(['run.failed']);
  });

  it("the interrupt's reason travels in the closing event's own field, beside its message", () => {
    const closing: RecordParams[] = [];
    const machine = runMachine.provide({
      actors: { plan: fromPromise<PlanOutput, PlanInput>(() => new Promise(() => {})) },
      actions: { record: (_, p: RecordParams) => void closing.push(p) },
    });
    const interrupted = (reason?: string) => {
      closing.length = 0;
      const actor = createActor(machine, { input: runInput() }).start();
      actor.send(reason === undefined ? { type: 'interrupt' } : { type: 'interrupt', reason });
      expect(actor.getSnapshot().value).toBe('interrupted');
      return closing[0]!;
    };
    expect(interrupted('the operator').payload).toMatchObject({
      reason: 'interrupted',
      message: 'the run was interrupted: the operator',
      interruptReason: 'the operator',
    });
    expect(interrupted().payload).toMatchObject({
      message: 'the run was interrupted',
      interruptReason: null,
    });
    expect(interrupted('').payload).toMatchObject({
      message: 'the run was interrupted',
      interruptReason: null,
    });
  });
});

describe('the outcome is the final state reached', () => {
  it('a plan a person rejects with no replan left ends in disapproved: the run aborted, so saying', async () => {
    const events: RecordParams[] = [];
    const machine = runMachine.provide({
      actors: {
        plan: fromPromise<PlanOutput, PlanInput>(async () => ({ plan: makePlan(), ...CALL_REPORT })),
        awaitApproval: fromPromise<ApprovalOutput, ApprovalInput>(async () => ({
          decision: 'reject',
          reason: 'too broad',
          by: 'a person',
        })),
      },
      actions: { record: (_, p: RecordParams) => void events.push(p) },
    });
    const actor = createActor(machine, { input: runInput({ approve: ['plan'], maxReplans: 0 }) }).start();
    const outcome = await toPromise(actor);
    expect(actor.getSnapshot().value).toBe('disapproved');
    expect(outcome.status).toBe('aborted');
    expect(events.at(-1)).toMatchObject({
      type: 'run.failed',
      payload: {
        reason: 'aborted',
        message: 'a person rejected the plan and no replan is left (maxReplans)',
        summary: expect.stringMatching(/^PGE Harness stopped \(aborted\)/),
      },
    });
    expect(events.at(-1)!.payload).not.toHaveProperty('interruptReason');
  });
});
