import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { replayActiveStates } from '../../src/dashboard/active-state.js';
import { RunStore } from '../../src/dashboard/run-store.js';
import type { ActiveStates } from '../../src/dashboard/run-view-types.js';
import { machineGraph } from '../../src/graph/machine-graph.js';
import { runMachine } from '../../src/machines/run-machine.js';
import { sessionMachine } from '../../src/machines/session-machine.js';
import { stepMachine } from '../../src/machines/step-machine.js';
import { readLogFile } from '../../src/persistence/index.js';
import { isClosingEvent, type RunEvent } from '../../src/schemas/index.js';
import { type RecordedRun, ROOT, recordRun } from './support.js';

/**
 * Where the dashboard says a run stands: asked of the charts, by replaying the run's events as
 * `pge replay` does (an ended run) or resuming them as a coordinator taking the run over would (a
 * run still going), on real runs of the demo model (passed, stopped by its budget, interrupted,
 * held at every gate, with and without a deadline) and on the logs kept as fixtures.
 */

const FIXTURES = join(ROOT, 'tests', 'fixtures', 'logs');
let demo: RecordedRun;
let budget: RecordedRun;
let interrupted: RecordedRun;
let gated: RecordedRun;
let timed: RecordedRun;
beforeAll(async () => {
  demo = await recordRun('Write a short guide to brewing green tea');
  budget = await recordRun('Write a short guide', undefined, { maxTokens: 3000 });
  interrupted = await recordRun('Write a short guide', undefined, {}, (event, pge) => {
    if (event.type === 'step.work.requested') pge.interrupt('a person stopped it');
  });
  gated = await recordRun(
    'Write a short guide',
    undefined,
    { approve: ['plan', 'contract', 'step'] },
    (e, pge) => {
      if (e.type !== 'approval.requested') return;
      setTimeout(() => pge.approve(e.runId, e.payload.gate, { decision: 'approve', by: 'tester' }), 5);
    },
  );
  timed = await recordRun(
    'Write a short guide',
    undefined,
    { approve: ['plan'], approvalTimeoutMs: 60_000 },
    (e, pge) => {
      if (e.type !== 'approval.requested') return;
      setTimeout(() => pge.approve(e.runId, e.payload.gate, { decision: 'approve', by: 'tester' }), 5);
    },
  );
}, 60_000);

/** The events up to and including the first of `type` (after `from`, if given). */
function upTo(events: readonly RunEvent[], type: RunEvent['type'], from = 0): RunEvent[] {
  const at = events.findIndex((e, i) => i >= from && e.type === type);
  expect(at, `no ${type} in the run`).toBeGreaterThanOrEqual(0);
  return events.slice(0, at + 1);
}

/** Where the charts stand after `events`, which they must replay without parting from them. */
async function statesAfter(events: readonly RunEvent[]): Promise<ActiveStates | null> {
  const { active, problem } = await replayActiveStates(events);
  expect(problem).toBeNull();
  return active;
}

/** The session's state, as a coordinator that took the run over after `event` would hold it. */
function sessionAfter(event: RunEvent): RegExp {
  if (isClosingEvent(event)) return /^session\.closed$/;
  if (event.type === 'approval.requested') return /^session\.open\.live\.awaitingDecision\.(un)?timed$/;
  // At a call (its deadline is the calling chart state's), between calls, or after a decision.
  return /^session\.open\.live\.working$/;
}

describe('active states', () => {
  it('are states of the charts, of the latest step, after every event of every run', async () => {
    const sessionIds = new Set(machineGraph(sessionMachine).nodes.map((n) => n.id));
    const runIds = new Set(machineGraph(runMachine).nodes.map((n) => n.id));
    const stepIds = new Set(machineGraph(stepMachine).nodes.map((n) => n.id));
    const fixtures = readdirSync(FIXTURES).filter((f) => f.endsWith('.md'));
    expect(fixtures.length).toBeGreaterThan(0);
    const logs = [
      ...(await Promise.all(fixtures.map((f) => readLogFile(join(FIXTURES, f))))),
      ...[demo, budget, interrupted, gated, timed].map((r) => r.events),
    ];
    for (const events of logs) {
      for (let n = 1; n <= events.length; n++) {
        const states = await statesAfter(events.slice(0, n));
        const at = `${events[0]!.runId} after seq ${n} (${events[n - 1]!.type})`;
        expect(states, at).not.toBeNull();
        expect(sessionIds, at).toContain(states!.session);
        expect(states!.session, at).toMatch(sessionAfter(events[n - 1]!));
        expect(runIds, at).toContain(states!.run);
        const started = events.slice(0, n).findLast((e) => e.type === 'step.started');
        expect(states!.stepNumber, at).toBe(started?.payload.stepNumber ?? null);
        if (started) expect(stepIds, at).toContain(states!.step);
        else expect(states!.step, at).toBeNull();
      }
    }
  }, 120_000);

  it('follows a run through planning, each step phase and completion', async () => {
    const e = demo.events;
    expect((await statesAfter(upTo(e, 'plan.requested')))?.run).toBe('run.planning.calling');
    expect(await statesAfter(upTo(e, 'step.contract.requested'))).toEqual({
      session: 'session.open.live.working',
      run: 'run.stepping.waiting',
      step: 'step.negotiating.proposing',
      stepNumber: 1,
    });
    expect((await statesAfter(upTo(e, 'step.review.requested')))?.step).toBe('step.negotiating.reviewing');
    expect((await statesAfter(upTo(e, 'step.work.requested')))?.step).toBe('step.executing.firstAttempt');
    expect((await statesAfter(upTo(e, 'step.evaluation.requested')))?.step).toBe('step.evaluating');
    expect((await statesAfter(upTo(e, 'step.attempt.judged')))?.step).toBe('step.judging');
    expect((await statesAfter(upTo(e, 'step.retry.scheduled')))?.step).toBe('step.executing.refining');
    expect(await statesAfter(upTo(e, 'step.passed'))).toMatchObject({
      run: 'run.stepping.scheduling',
      step: 'step.passed',
    });
    const second = upTo(e, 'step.started', upTo(e, 'step.passed').length);
    expect(await statesAfter(second)).toMatchObject({ step: 'step.negotiating.proposing', stepNumber: 2 });
    expect(await statesAfter(e)).toMatchObject({ run: 'run.completed', step: 'step.passed', stepNumber: 3 });
  });

  it('waits at each gate for a person, and goes on once a person has decided', async () => {
    const e = gated.events;
    const at = (type: RunEvent['type'], n: number) => {
      const seqs = e.filter((x) => x.type === type).map((x) => x.seq);
      return e.slice(0, seqs[n]!);
    };
    expect((await statesAfter(at('approval.requested', 0)))?.run).toBe('run.planning.awaitingApproval');
    expect((await statesAfter(at('approval.decided', 0)))?.run).toBe('run.stepping.scheduling');
    expect((await statesAfter(at('approval.requested', 1)))?.step).toBe('step.negotiating.awaitingApproval');
    expect((await statesAfter(at('approval.decided', 1)))?.step).toBe('step.executing.firstAttempt');
    expect((await statesAfter(at('approval.requested', 2)))?.step).toBe('step.awaitingApproval');
  });

  it('ends in the final states a failed run reached', async () => {
    expect(budget.events.at(-1)).toMatchObject({ type: 'run.failed', payload: { reason: 'budget' } });
    expect(await statesAfter(budget.events)).toMatchObject({ run: 'run.stopped', step: 'step.stopped' });
    expect(interrupted.events.at(-1)).toMatchObject({
      type: 'run.failed',
      payload: { reason: 'interrupted' },
    });
    expect(await statesAfter(interrupted.events)).toMatchObject({
      run: 'run.interrupted',
      step: 'step.executing.firstAttempt',
    });
  });

  it('says where the charts part from an ended run, and places no run seen from the middle', async () => {
    const judged = demo.events.findIndex((e) => e.type === 'step.attempt.judged');
    const forged = demo.events.map((e, i) =>
      i === judged ? ({ ...e, payload: { ...e.payload, weightedMean: 0.123 } } as RunEvent) : e,
    );
    const { active, problem } = await replayActiveStates(forged);
    expect(problem).toMatch(
      new RegExp(`^run ${demo.events[0]!.runId}: its charts part from its events at seq ${judged + 1}: `),
    );
    expect(active?.step).toBe('step.judging');
    // A run still going parts from its events where they stop: that is where it stands, no problem.
    expect((await replayActiveStates(forged.slice(0, judged + 1))).problem).toBeNull();
    expect(await replayActiveStates(demo.events.slice(20))).toEqual({ active: null, problem: null });
  });
});

describe('the session', () => {
  it('stands where a coordinator that took the run over would: at a call, at a gate, between, closed', async () => {
    const states = async (events: readonly RunEvent[]) => await statesAfter(events);
    const session = async (events: readonly RunEvent[]) => (await statesAfter(events))?.session;
    const e = demo.events;
    // At a call the session works on; the chart state that made the call waits for it.
    expect(await states(upTo(e, 'plan.requested'))).toMatchObject({
      session: 'session.open.live.working',
      run: 'run.planning.calling',
    });
    expect(await session(upTo(e, 'plan.created'))).toBe('session.open.live.working');
    expect(await states(upTo(e, 'step.work.requested'))).toMatchObject({
      session: 'session.open.live.working',
      step: 'step.executing.firstAttempt',
    });
    expect(await session(upTo(e, 'step.attempt.judged'))).toBe('session.open.live.working');
    expect(await session(e)).toBe('session.closed');
    expect(await session(upTo(gated.events, 'approval.requested'))).toBe(
      'session.open.live.awaitingDecision.untimed',
    );
    expect(await session(upTo(gated.events, 'approval.decided'))).toBe('session.open.live.working');
    expect(await session(upTo(timed.events, 'approval.requested'))).toBe(
      'session.open.live.awaitingDecision.timed',
    );
    expect(await session(budget.events)).toBe('session.closed');
    expect(await session(interrupted.events)).toBe('session.closed');
  });

  it('leaves no timer behind, and nothing it recorded reaches the view', async () => {
    const calling = upTo(demo.events, 'step.work.requested');
    // Every timer set while it replays is counted: a call waits for its result (`after
    // callDeadline`), a timed gate for a person (`after approvalDeadline`), until the run is let go.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval'] });
    try {
      expect((await statesAfter(calling))?.step).toBe('step.executing.firstAttempt');
      expect((await statesAfter(upTo(timed.events, 'approval.requested')))?.session).toMatch(/timed$/);
      expect(vi.getTimerCount()).toBe(0);
    } finally {
      vi.useRealTimers();
    }

    const store = new RunStore({ replayDelayMs: 0 });
    for (const event of calling) store.add(event);
    await store.settled();
    const view = store.view(demo.events[0]!.runId)!;
    expect(view.active?.step).toBe('step.executing.firstAttempt');
    expect(view.timeline.map((t) => t.seq)).toEqual(calling.map((c) => c.seq));
    expect(view.timeline.map((t) => t.type)).not.toContain('run.resumed');
  });
});

describe('the store', () => {
  it('replays a burst of events once, and shows a run only with where its charts stand', async () => {
    const store = new RunStore();
    const runId = demo.events[0]!.runId;
    const seen: (ActiveStates | null)[] = [];
    store.subscribe((id) => {
      if (id === runId) seen.push(store.view(id)!.active);
    });
    for (const event of demo.events) store.add(event);
    expect(store.view(runId)).toBeUndefined();
    await store.settled();
    expect(seen).toEqual([
      { session: 'session.closed', run: 'run.completed', step: 'step.passed', stepNumber: 3 },
    ]);
    expect(store.view(runId)!.timeline).toHaveLength(demo.events.length);
    expect(store.problems).toEqual([]);
  });

  it('replays a run read back from its start only as far as its events have no gap', async () => {
    const store = new RunStore();
    const runId = demo.events[0]!.runId;
    const missing = demo.events.findIndex((e) => e.type === 'step.work.requested') + 1;
    for (const event of demo.events) if (event.seq !== missing) store.add(event);
    await store.settled();
    expect(store.view(runId)!.active).toEqual(await statesAfter(demo.events.slice(0, missing - 1)));
    store.add(demo.events[missing - 1]!);
    await store.settled();
    expect(store.view(runId)!.active?.run).toBe('run.completed');
    expect(store.problems).toEqual([]);
  });
});
