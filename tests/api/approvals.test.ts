import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { PgeOptions } from '../../src/api/options.js';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { readLogFile } from '../../src/persistence/index.js';
import { replayLog } from '../../src/runtime/replay-log.js';
import type { ApprovalGate, ContractInput, PlanInput, RunEvent, WorkInput } from '../../src/schemas/index.js';
import { ScriptedModel } from '../../src/testing.js';
import { approve, evaluate, passingScript, planOf, proposal, times, work } from '../support/scripts.js';

/**
 * Approval gates on the embedded API: the run waits in the chart's `awaitingApproval` state until
 * `approve(runId, gate, decision)`; a rejection goes back to the planner, to negotiation or to the
 * generator with the reason. The decisions are in the log, and the run replays from it.
 */

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'pge-approvals-'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

type Decide = (gate: ApprovalGate, n: number) => { decision: 'approve' | 'reject'; reason?: string };

/**
 * Runs one task with the given gates; `decide` answers the n-th request at each gate (from 1).
 * Returns the events, the scripted model and the log path.
 */
async function gatedRun(
  model: ScriptedModel,
  gates: ApprovalGate[],
  decide: Decide,
  options: PgeOptions = {},
) {
  const events: RunEvent[] = [];
  const asked = new Map<ApprovalGate, number>();
  const pge: PlannerGeneratorEvaluator = new PlannerGeneratorEvaluator({
    plannerAgent: model,
    generatorAgent: model,
    evaluatorAgent: model,
    workingDirectory: dir,
    approve: gates,
    onEvent: (event) => {
      events.push(event);
      if (event.type !== 'approval.requested') return;
      const n = (asked.get(event.payload.gate) ?? 0) + 1;
      asked.set(event.payload.gate, n);
      // Nothing goes on until a person decides: the decision comes a little later, as a person's would.
      setTimeout(() => {
        expect(pge.pendingApprovals()).toEqual([
          { runId: event.runId, gate: event.payload.gate, requestId: event.id },
        ]);
        expect(
          pge.approve(event.runId, event.payload.gate, { ...decide(event.payload.gate, n), by: 'tester' }),
        ).toBe(true);
      }, 20);
    },
    ...options,
  });
  await pge.run('Write a short guide');
  await pge.close();
  return { events, log: pge.lastResult!.outputPath, pge };
}

const types = (events: RunEvent[]) => events.map((e) => e.type);

describe('approval gates (embedded)', () => {
  it('holds the run at its plan until approved: no step starts before', async () => {
    const model = new ScriptedModel(passingScript(1));
    const { events, log } = await gatedRun(model, ['plan'], () => ({ decision: 'approve' }));
    const t = types(events);
    expect(t.indexOf('approval.requested')).toBeGreaterThan(t.indexOf('plan.created'));
    expect(t.indexOf('approval.decided')).toBeLessThan(t.indexOf('step.started'));
    expect(events.find((e) => e.type === 'approval.decided')?.payload).toMatchObject({
      gate: 'plan',
      decision: 'approve',
      reason: null,
      by: 'tester',
    });
    expect(events.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true } });
    // The decision is in the log: the run replays from it.
    expect(await replayLog(log)).toMatchObject({ identical: true, modelCalls: 0 });
  });

  it('sends a rejected plan back to the planner with the reason', async () => {
    const model = new ScriptedModel({
      plan: [{ json: planOf(1) }, { json: planOf(1) }],
      contract: [proposal],
      contract_review: [approve],
      work: [work()],
      evaluation: [evaluate(9)],
    });
    const { events, log } = await gatedRun(model, ['plan'], (_gate, n) =>
      n === 1 ? { decision: 'reject', reason: 'add a step on safety' } : { decision: 'approve' },
    );
    const plans = model.requestsOf('plan');
    expect(plans).toHaveLength(2);
    const replan = (JSON.parse(plans[1]!.messages[1]!.content.split('INPUT (JSON):\n')[1]!) as PlanInput)
      .replan;
    expect(replan).toMatchObject({
      reason: 'disapproved',
      failedStepId: null,
      actionableFeedback: ['add a step on safety'],
    });
    expect(types(events).filter((t) => t === 'approval.decided')).toHaveLength(2);
    expect(events.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true } });
    expect(await replayLog(log)).toMatchObject({ identical: true, modelCalls: 0 });
  });

  it('sends a rejected contract back to negotiation, and a rejected result back to the generator, each with the reason', async () => {
    const model = new ScriptedModel({
      plan: [{ json: planOf(1) }],
      contract: times(2, proposal),
      contract_review: times(2, approve),
      work: times(2, work()),
      evaluation: times(2, evaluate(9)),
    });
    const { events, log } = await gatedRun(model, ['contract', 'step'], (gate, n) =>
      n === 1 ? { decision: 'reject', reason: `${gate} not good enough` } : { decision: 'approve' },
    );
    const inputOf = (content: string) => JSON.parse(content.split('INPUT (JSON):\n')[1]!);
    const second = inputOf(model.requestsOf('contract')[1]!.messages[1]!.content) as ContractInput;
    expect(second.previous?.amendments).toEqual(['a person rejected the contract: contract not good enough']);
    const retry = inputOf(model.requestsOf('work')[1]!.messages[1]!.content) as WorkInput;
    expect(retry.retry?.feedback).toEqual(['a person rejected the result: step not good enough']);
    const judged = events.flatMap((e) =>
      e.type === 'step.attempt.judged' ? [[e.payload.verdict, e.payload.reason]] : [],
    );
    expect(judged).toEqual([
      ['fail', 'rejected'],
      ['pass', 'all_criteria_pass'],
    ]);
    expect(events.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true } });
    const logged = await readLogFile(log);
    expect(
      logged
        .filter((e) => e.type === 'approval.requested')
        .map((e) => e.type === 'approval.requested' && e.payload.gate),
    ).toEqual(['contract', 'contract', 'step', 'step']);
    expect(await replayLog(log)).toMatchObject({ identical: true, modelCalls: 0 });
  });

  it('aborts the run when the plan is rejected with no replan left, and ignores a decision for another gate', async () => {
    const model = new ScriptedModel({ plan: [{ json: planOf(1) }] });
    const { events, pge } = await gatedRun(model, ['plan'], () => ({ decision: 'reject', reason: 'no' }), {
      maxReplans: 0,
    });
    expect(events.at(-1)).toMatchObject({
      type: 'run.failed',
      payload: {
        reason: 'aborted',
        message: 'a person rejected the plan and no replan is left (maxReplans)',
      },
    });
    expect(pge.approve(events[0]!.runId, 'step', { decision: 'approve' })).toBe(false);
  });

  it.each([
    ['approve', 'completed'],
    ['stop', 'failed'],
  ] as const)('decides by the deadline when no one answers: %s', async (policy, closing) => {
    const model = new ScriptedModel(passingScript(1));
    const events: RunEvent[] = [];
    const pge = new PlannerGeneratorEvaluator({
      plannerAgent: model,
      generatorAgent: model,
      evaluatorAgent: model,
      workingDirectory: dir,
      approve: ['plan'],
      approvalTimeoutMs: 50,
      onApprovalTimeout: policy,
      onEvent: (e) => events.push(e),
    });
    await pge.run('Write a short guide').catch(() => undefined);
    await pge.close();
    expect(events[0]).toMatchObject({
      payload: { settings: { approvalDeadline: { timeoutMs: 50, policy } } },
    });
    if (policy === 'approve') {
      expect(events.find((e) => e.type === 'approval.decided')?.payload).toMatchObject({
        decision: 'approve',
        reason: 'no decision within 50 ms',
        by: 'deadline',
      });
      expect(events.at(-1)).toMatchObject({ type: `run.${closing}`, payload: { passed: true } });
    } else {
      expect(events.some((e) => e.type === 'approval.decided')).toBe(false);
      expect(events.at(-1)).toMatchObject({
        type: `run.${closing}`,
        payload: {
          reason: 'interrupted',
          message: 'the run was interrupted: the plan gate had no decision within 50 ms',
        },
      });
    }
  });
});
