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
import { isClosingEvent, type RunEvent, type RunEventOf } from '../../src/schemas/index.js';
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
    // At step 2's work (steps 1 and 2 run side by side): step 2 is the latest step.
    if (event.type === 'step.work.requested' && event.payload.input.stepNumber === 2)
      pge.interrupt('a person stopped it');
  });
  gated = await recordRun(
    'Write a short guide',
    undefined,
    // One step at a time, so that the gates come plan, contract, step, as the test below reads them.
    { approve: ['plan', 'contract', 'step'], maxParallelSteps: 1 },
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

/** The step an event is about: its own, or that of the request it makes. */
function stepNumberOf(event: RunEvent): number | undefined {
  const payload = event.payload as { stepNumber?: number; input?: { stepNumber?: number } };
  return payload.stepNumber ?? payload.input?.stepNumber;
}

/** The events up to and including the first of `type` about step `stepNumber`. */
function upToStep(events: readonly RunEvent[], type: RunEvent['type'], stepNumber: number): RunEvent[] {
  const at = events.findIndex((e) => e.type === type && stepNumberOf(e) === stepNumber);
  expect(at, `no ${type} of step ${stepNumber} in the run`).toBeGreaterThanOrEqual(0);
  return events.slice(0, at + 1);
}

/**
 * The plan positions of the steps running after `events`, as their events tell: started, and not
 * yet passed, failed or sent back to the planner, while the run has not ended.
 */
function runningAfter(events: readonly RunEvent[]): number[] {
  const running = new Set<number>();
  for (const e of events) {
    if (e.type === 'step.started') running.add(e.payload.stepNumber);
    else if (e.type === 'step.passed' || e.type === 'step.failed' || e.type === 'step.plan.rejected')
      running.delete(e.payload.stepNumber);
    else if (isClosingEvent(e)) running.clear();
  }
  return [...running].sort((a, b) => a - b);
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
  it('are states of the charts, of every step running and the latest, after every event of every run', async () => {
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
      const brokeBudget = events.some((e) => e.type === 'run.failed' && e.payload.reason === 'budget');
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
        const running = states!.steps.map((s) => s.stepNumber);
        // A step the budget stops ends in its chart (`step.stopped`) with no event of its own.
        if (brokeBudget)
          expect(runningAfter(events.slice(0, n)), at).toEqual(expect.arrayContaining(running));
        else expect(running, at).toEqual(runningAfter(events.slice(0, n)));
        for (const { step } of states!.steps) expect(stepIds, at).toContain(step);
      }
    }
  }, 120_000);

  it('follows a run through planning, steps side by side, each step phase and completion', async () => {
    const e = demo.events;
    expect((await statesAfter(upTo(e, 'plan.requested')))?.run).toBe('run.planning.calling');
    // The demo's first two steps depend on nothing: once the second has started, both charts run.
    expect(await statesAfter(upTo(e, 'step.started', upTo(e, 'step.started').length))).toEqual({
      session: 'session.open.live.working',
      run: 'run.stepping.waiting',
      step: 'step.negotiating.proposing',
      stepNumber: 2,
      steps: [
        { stepNumber: 1, step: 'step.negotiating.proposing' },
        { stepNumber: 2, step: 'step.negotiating.proposing' },
      ],
    });
    // Step 1 through its phases, whatever step 2 does beside it.
    const first = async (type: RunEvent['type']) =>
      (await statesAfter(upToStep(e, type, 1)))?.steps.find((s) => s.stepNumber === 1)?.step;
    expect(await first('step.contract.requested')).toBe('step.negotiating.proposing');
    expect(await first('step.review.requested')).toBe('step.negotiating.reviewing');
    expect(await first('step.work.requested')).toBe('step.executing.firstAttempt');
    expect(await first('step.evaluation.requested')).toBe('step.evaluating');
    expect(await first('step.attempt.judged')).toBe('step.judging');
    expect(await first('step.retry.scheduled')).toBe('step.executing.refining');
    // Whichever of the two passes first, its chart has ended and the other goes on; the draft waits for both.
    const [once, both] = e.filter((x) => x.type === 'step.passed').map((x) => x.payload.stepNumber);
    expect([once, both].sort()).toEqual([1, 2]);
    expect(await statesAfter(upToStep(e, 'step.passed', once!))).toMatchObject({
      run: 'run.stepping.waiting',
      stepNumber: 2,
      steps: [{ stepNumber: both }],
    });
    expect(await statesAfter(upToStep(e, 'step.passed', both!))).toMatchObject({
      run: 'run.stepping.scheduling',
      stepNumber: 2,
      steps: [],
    });
    expect(await statesAfter(upToStep(e, 'step.started', 3))).toMatchObject({
      step: 'step.negotiating.proposing',
      stepNumber: 3,
      steps: [{ stepNumber: 3, step: 'step.negotiating.proposing' }],
    });
    expect(await statesAfter(e)).toMatchObject({
      run: 'run.completed',
      step: 'step.passed',
      stepNumber: 4,
      steps: [],
    });
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
    // The run chart, ended, stops every step still running: none runs, the latest stays where it was.
    expect(await statesAfter(budget.events)).toMatchObject({
      run: 'run.stopped',
      step: 'step.stopped',
      steps: [],
    });
    expect(interrupted.events.at(-1)).toMatchObject({
      type: 'run.failed',
      payload: { reason: 'interrupted' },
    });
    expect(await statesAfter(interrupted.events)).toMatchObject({
      run: 'run.interrupted',
      step: 'step.executing.firstAttempt',
      steps: [],
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
    const step = (demo.events[judged] as RunEventOf<'step.attempt.judged'>).payload.stepNumber;
    expect(active?.steps.find((s) => s.stepNumber === step)?.step).toBe('step.judging');
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
    expect(await states(upToStep(e, 'step.work.requested', 2))).toMatchObject({
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
    const calling = upToStep(demo.events, 'step.work.requested', 2);
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
      { session: 'session.closed', run: 'run.completed', step: 'step.passed', stepNumber: 4, steps: [] },
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
