import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { PgeOptions } from '../../src/api/options.js';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { readLogFile, renderLog } from '../../src/persistence/index.js';
import type { Model, ModelAnswer, ModelRequest } from '../../src/roles/model.js';
import { replayLog } from '../../src/runtime/replay-log.js';
import {
  isRoleRequest,
  type Plan,
  type RunEvent,
  type RunEventOf,
  type WorkInput,
} from '../../src/schemas/index.js';
import { type Script, ScriptedModel } from '../../src/testing.js';
import { approve, evaluate, planOf, proposal, times, work } from '../support/scripts.js';

/**
 * Steps side by side through the embedded runtime (issue #34): the events of concurrent steps
 * interleave in the log in the order they were recorded, a replay reproduces them identically with
 * no model call, and a resume after a crash with several steps in flight asks again only the calls
 * that were in flight.
 */

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'pge-parallel-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** Two chains: s1 → s3 and s2 → s4, and s5 on its own. */
function chains(): Plan {
  const plan = planOf(5);
  const needs: Record<string, string[]> = { s1: [], s2: [], s3: ['s1'], s4: ['s2'], s5: [] };
  return { ...plan, steps: plan.steps.map((s) => ({ ...s, dependsOn: needs[s.id]! })) };
}

/** s2's first work fails its evaluation, so that the chains go at different paces. */
function script(): Script {
  return {
    plan: times(10, { json: chains() }),
    contract: times(100, proposal),
    contract_review: times(100, approve),
    work: times(100, work()),
    evaluation: times(100, (request, input) => {
      const { step, attempt } = input as WorkInput;
      const answer = evaluate(step.id === 's2' && attempt === 1 ? 4 : 9);
      return typeof answer === 'function' ? answer(request, input) : answer;
    }),
  };
}

/**
 * The scripted model, each answer after a delay that depends on the step and the call, so that the
 * steps' calls overlap and finish out of order.
 */
class SlowModel implements Model {
  readonly name = 'slow scripted';
  readonly inner: ScriptedModel;
  constructor() {
    this.inner = new ScriptedModel(script(), { costUsd: 0.01 });
  }
  get requests() {
    return this.inner.requests;
  }
  async complete(request: ModelRequest): Promise<ModelAnswer> {
    const text = JSON.stringify(request.messages);
    const step = /"id":"s(\d)"/.exec(text)?.[1] ?? '0';
    await new Promise((resolve) => setTimeout(resolve, 3 + ((Number(step) * 7 + text.length) % 13)));
    return this.inner.complete(request);
  }
}

function harness(options: PgeOptions = {}) {
  const model = new SlowModel();
  const pge = new PlannerGeneratorEvaluator({
    plannerAgent: model,
    generatorAgent: model,
    evaluatorAgent: model,
    workingDirectory: dir,
    maxRepairs: 0,
    ...options,
  });
  return { model, pge };
}

async function recorded(): Promise<{ path: string; events: RunEvent[]; calls: number }> {
  const path = join(dir, 'run.md');
  const { model, pge } = harness({ sharedStatePath: path });
  try {
    await pge.run('Write a guide');
  } finally {
    await pge.close();
  }
  return { path, events: await readLogFile(path), calls: model.requests.length };
}

/** The requests of `events` not answered (nor cancelled) within them: in flight at a cut there. */
function inFlight(events: readonly RunEvent[]): string[] {
  const open = new Map<string, string>();
  for (const e of events) {
    if (isRoleRequest(e)) {
      const input = (e.payload as { input: { step?: { id: string } } }).input;
      open.set(input.step?.id ?? 'plan', e.id);
    } else if ('stepId' in e.payload && e.type !== 'step.started') {
      const stepId = (e.payload as { stepId: string }).stepId;
      if (open.has(stepId) && e.type !== 'model.call.completed') open.delete(stepId);
    } else if (e.type === 'plan.created') open.delete('plan');
  }
  return [...open.values()];
}

/** What each step decided, in its own order: concurrent steps may interleave differently after a resume. */
function byStep(events: readonly RunEvent[]) {
  const steps = new Map<string, string[]>();
  for (const e of events) {
    if (!('stepId' in e.payload) || e.type === 'model.call.completed') continue;
    const { stepId } = e.payload as { stepId: string };
    steps.set(stepId, [...(steps.get(stepId) ?? []), e.type]);
  }
  return Object.fromEntries([...steps].sort());
}

describe('steps side by side, embedded', () => {
  it('records concurrent steps interleaved, and replays them identically with no model call', async () => {
    const run = await recorded();
    const { events } = run;
    expect(events.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true, stepsPassed: 5 } });
    // Steps ran at once: another step's event comes between a step's start and its end.
    const started = events.findIndex((e) => e.type === 'step.started' && e.payload.stepId === 's1');
    const passed = events.findIndex((e) => e.type === 'step.passed' && e.payload.stepId === 's1');
    const between = events.slice(started, passed).filter((e) => 'stepId' in e.payload);
    expect(new Set(between.map((e) => (e.payload as { stepId: string }).stepId)).size).toBeGreaterThan(1);
    expect(events[0]).toMatchObject({ payload: { settings: { maxParallelSteps: 4 } } });
    // The log parses back whole, in seq order, and a replay produces every event again in its order.
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(await replayLog(run.path)).toMatchObject({
      identical: true,
      modelCalls: 0,
      firstDifference: null,
    });
  });

  it('resumes a run cut with several steps in flight, asking again only the calls in flight', async () => {
    const full = await recorded();
    const cuts = [...full.events.keys()].filter(
      (k) => k > 0 && inFlight(full.events.slice(0, k)).length >= 2,
    );
    expect(cuts.length).toBeGreaterThan(5);
    let three = 0;
    for (const k of cuts) {
      const cut = full.events.slice(0, k);
      const lost = inFlight(cut);
      if (lost.length >= 3) three++;
      const path = join(dir, `cut-${k}.md`);
      writeFileSync(path, renderLog(cut));
      const { model, pge } = harness();
      try {
        await pge.resume(path);
      } finally {
        await pge.close();
      }
      const events = await readLogFile(path);
      const where = `cut after ${k} (${lost.length} in flight)`;
      const resumed = events[k] as RunEventOf<'run.resumed'>;
      expect(resumed.type, where).toBe('run.resumed');
      expect([...resumed.payload.repeated].sort(), where).toEqual([...lost].sort());
      expect(events.at(-1), where).toMatchObject({ type: 'run.completed', payload: { stepsPassed: 5 } });
      expect(byStep(events), where).toEqual(byStep(full.events));
      // The calls asked: those the cut log does not answer, and no more (a call in flight whose
      // model call was recorded before the crash is asked again, whole).
      const answeredCalls = cut.filter(
        (e) => e.type === 'model.call.completed' && !lost.includes(e.payload.requestId),
      ).length;
      expect(model.requests.length, where).toBe(full.calls - answeredCalls);
    }
    expect(three).toBeGreaterThan(0);
  }, 120_000);
});

describe('a run stopped with steps side by side', () => {
  it('lists each step in flight, where its chart stood, in the closing event, and replays it exactly', async () => {
    const path = join(dir, 'stopped.md');
    const asked = new Map<string, string>();
    const { pge } = harness({
      sharedStatePath: path,
      onEvent: (event) => {
        if (!isRoleRequest(event) || event.type === 'plan.requested') return;
        asked.set((event.payload.input as { step: { id: string } }).step.id, event.type);
        // Two steps have each asked for their work: Ctrl-C.
        if ([...asked.values()].filter((t) => t === 'step.work.requested').length === 2)
          pge.interrupt('operator');
      },
    });
    try {
      await pge.run('Write a guide');
    } finally {
      await pge.close();
    }
    const events = await readLogFile(path);
    const closing = events.at(-1) as RunEventOf<'run.failed'>;
    expect(closing.payload.reason).toBe('interrupted');
    const inFlight = closing.payload.inFlight ?? [];
    expect(inFlight.length).toBeGreaterThanOrEqual(2);
    // Every step listed had a call cancelled before the close, and every cancelled call's step is listed.
    const cancelled = events.filter((e) => e.type === 'request.cancelled').map((e) => e.payload.requestId);
    const stepOfRequest = (id: string) => {
      const request = events.find((e) => e.id === id)!;
      return (request.payload as { input: { step: { id: string } } }).input.step.id;
    };
    expect(cancelled.map(stepOfRequest).sort()).toEqual(inFlight.map((s) => s.stepId).sort());
    // In plan order, each where its chart stood: the steps that asked for work are in `executing`.
    expect(inFlight.map((s) => s.stepNumber)).toEqual([...inFlight.map((s) => s.stepNumber)].sort());
    for (const step of inFlight) {
      const state = asked.get(step.stepId) === 'step.work.requested' ? /^executing\./ : /^negotiating\./;
      expect(step.state).toMatch(state);
      expect(step.attempt).toBe(1);
    }
    // A reader of the log sees them in the summary.
    const text = readFileSync(path, 'utf8');
    expect(text).toContain('**Steps stopped in flight**');
    for (const step of inFlight)
      expect(text).toContain(`| ${step.stepNumber} | ${step.stepId} | 1 | ${step.state} |`);
    expect(await replayLog(path)).toMatchObject({ identical: true, modelCalls: 0 });
    // The field is compared: a log whose closing event says otherwise does not replay identically.
    const forged = { ...closing, payload: { ...closing.payload, inFlight: inFlight.slice(1) } };
    writeFileSync(path, renderLog([...events.slice(0, -1), forged]));
    expect(await replayLog(path)).toMatchObject({ identical: false, firstDifference: { seq: closing.seq } });
  });
});

describe('a run cancelled with steps side by side', () => {
  it('ends cancelled, naming who asked and why, and replays to the same cancel', async () => {
    const path = join(dir, 'cancelled.md');
    let works = 0;
    const { pge } = harness({
      sharedStatePath: path,
      onEvent: (event) => {
        if (event.type === 'step.work.requested' && ++works === 2)
          pge.cancel(event.runId, 'alice', 'wrong task');
      },
    });
    try {
      await pge.run('Write a guide');
      expect(pge.lastResult?.status).toBe('cancelled');
      expect(pge.cancel(pge.lastResult!.runId, 'bob')).toBe(false);
    } finally {
      await pge.close();
    }
    const events = await readLogFile(path);
    const closing = events.at(-1) as RunEventOf<'run.failed'>;
    expect(closing.payload).toMatchObject({
      reason: 'cancelled',
      cancelled: { by: 'alice', reason: 'wrong task' },
      message: 'the run was cancelled by alice: wrong task',
    });
    expect(closing.payload.inFlight?.length).toBeGreaterThanOrEqual(2);
    expect(events.at(-2)?.type).toBe('request.cancelled');
    expect(readFileSync(path, 'utf8')).toContain('FAILED (cancelled)');
    expect(await replayLog(path)).toMatchObject({ identical: true, modelCalls: 0 });
  });
});

describe('a fork of a run whose steps ran side by side', () => {
  it('keeps what its parent recorded before step N started, and runs N and what starts after it anew', async () => {
    const parent = await recorded();
    // s3 needs s1: it starts once s1 has passed, while s2 (and s5) may still be running.
    const at = parent.events.findIndex((e) => e.type === 'step.started' && e.payload.stepId === 's3');
    const prefix = parent.events.slice(0, at);
    const runningThen = inFlight(prefix);
    const { model, pge } = harness();
    const logPath = join(dir, 'fork.md');
    try {
      await pge.fork(parent.path, { fromStep: 3, logPath });
    } finally {
      await pge.close();
    }
    const events = await readLogFile(logPath);
    expect(events.at(-1)).toMatchObject({ type: 'run.completed', payload: { stepsPassed: 5 } });
    // The steps that had passed are not run again; s3 is, once.
    const startedIn = (evs: readonly RunEvent[], id: string) =>
      evs.filter((e) => e.type === 'step.started' && e.payload.stepId === id).length;
    expect(startedIn(events, 's1')).toBe(1);
    expect(startedIn(events.slice(at), 's1')).toBe(0);
    expect(startedIn(events.slice(at), 's3')).toBe(1);
    // The calls in flight when s3 started are asked again; nothing recorded before it is.
    const resumed = events.find((e) => e.type === 'run.resumed') as RunEventOf<'run.resumed'>;
    const forkIds = (ids: string[]) => ids.map((id) => id.replace(parent.events[0]!.runId, events[0]!.runId));
    expect([...resumed.payload.repeated].sort()).toEqual(forkIds(runningThen).sort());
    const answeredBefore = prefix.filter(
      (e) => e.type === 'model.call.completed' && !runningThen.includes(e.payload.requestId),
    ).length;
    expect(model.requests.length).toBe(parent.calls - answeredBefore);
  });
});

describe('gates of steps side by side', () => {
  it('holds each step at its own contract gate, not its siblings, and replays the decisions in order', async () => {
    const path = join(dir, 'gated.md');
    const events: RunEvent[] = [];
    const waitingTogether: number[] = [];
    const model = new SlowModel();
    const pge: PlannerGeneratorEvaluator = new PlannerGeneratorEvaluator({
      plannerAgent: model,
      generatorAgent: model,
      evaluatorAgent: model,
      workingDirectory: dir,
      sharedStatePath: path,
      maxRepairs: 0,
      approve: ['contract'],
      onEvent: (event) => {
        events.push(event);
        if (event.type !== 'approval.requested') return;
        // s1 waits for a person a while; every other gate is approved at once.
        const delay = event.payload.stepId === 's1' ? 300 : 0;
        setTimeout(() => {
          waitingTogether.push(pge.pendingApprovals().length);
          expect(pge.approve(event.runId, 'contract', { decision: 'approve', requestId: event.id })).toBe(
            true,
          );
        }, delay);
      },
    });
    try {
      await pge.run('Write a guide');
    } finally {
      await pge.close();
    }
    expect(events.at(-1)).toMatchObject({ type: 'run.completed', payload: { stepsPassed: 5 } });
    const at = (type: RunEvent['type'], stepId: string) =>
      events.findIndex((e) => e.type === type && (e.payload as { stepId?: string }).stepId === stepId);
    const s1Gate = events[at('approval.requested', 's1')]!.id;
    const s1Decided = events.findIndex(
      (e) => e.type === 'approval.decided' && e.payload.requestId === s1Gate,
    );
    // While s1 waited at its gate, s2 and s5 went through theirs and on to their work.
    expect(s1Decided).toBeGreaterThan(0);
    expect(at('step.work.requested', 's2')).toBeLessThan(s1Decided);
    expect(at('step.work.requested', 's5')).toBeLessThan(s1Decided);
    // s3 needs s1, so it waited with it.
    expect(at('step.started', 's3')).toBeGreaterThan(at('step.passed', 's1'));
    // Gates were open at once (s1's and another's), each decided on its own.
    expect(Math.max(...waitingTogether)).toBeGreaterThanOrEqual(2);
    expect(await replayLog(path)).toMatchObject({ identical: true, modelCalls: 0 });
  });
});
