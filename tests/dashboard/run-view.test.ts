import { beforeAll, describe, expect, it } from 'vitest';
import { parseLogPrefix } from '../../src/dashboard/log-follower.js';
import { RunStore } from '../../src/dashboard/run-store.js';
import { afterClosingProblem, buildRunView, byAttention, summarize } from '../../src/dashboard/run-view.js';
import type { RunSummary } from '../../src/dashboard/run-view-types.js';
import { renderEvent } from '../../src/persistence/index.js';
import { isRoleRequest, type RunEvent, type RunEventOf } from '../../src/schemas/index.js';
import { type RecordedRun, recordRun } from './support.js';

/**
 * What the dashboard makes of events, without a browser: the run view and the tolerant log
 * prefix, on a real demo run (the chart layout: chart-layout.test.ts; the active states:
 * active-state.test.ts).
 */

let demo: RecordedRun;
beforeAll(async () => {
  demo = await recordRun('Write a short guide to brewing green tea');
});

/** The events up to and including the first of `type` (after `from`, if given). */
function upTo(events: readonly RunEvent[], type: RunEvent['type'], from = 0): RunEvent[] {
  const at = events.findIndex((e, i) => i >= from && e.type === type);
  expect(at, `no ${type} in the run`).toBeGreaterThanOrEqual(0);
  return events.slice(0, at + 1);
}

describe('run view', () => {
  it('shows the call in flight as the child actor of the active state, until the next event', () => {
    const e = demo.events;
    const asked = upTo(e, 'step.work.requested');
    const request = asked.at(-1)!;
    const { stepNumber, step } = (request as RunEventOf<'step.work.requested'>).payload.input;
    const callOf = (events: RunEvent[], of: number | null = stepNumber) =>
      buildRunView(request.runId, events).calls.find((c) => c.stepNumber === of) ?? null;
    expect(callOf(asked)).toEqual({
      actor: 'doWork',
      role: 'generator',
      requestId: request.id,
      since: request.ts,
      stepNumber,
    });
    expect(callOf(upTo(e, 'plan.requested'), null)?.actor).toBe('plan');
    const answer = e.findIndex(
      (x, i) => i >= asked.length && 'stepId' in x.payload && x.payload.stepId === step.id,
    );
    expect(callOf(e.slice(0, answer + 1))?.requestId).not.toBe(request.id);
    // A stray result reported while the call waits (a redelivered answer to an earlier request) leaves it in flight.
    const stray = {
      id: `${request.runId}-stray`,
      runId: request.runId,
      seq: request.seq + 1,
      ts: request.ts,
      type: 'result.rejected',
      payload: { requestId: `${request.runId}-2`, worker: 'w', reason: 'duplicate' },
    } as const satisfies RunEvent;
    expect(callOf([...asked, stray])?.requestId).toBe(request.id);
    expect(buildRunView(request.runId, e).calls).toEqual([]);
    // Resumed after a crash with the call in flight: the call asked again is the one in flight.
    const resumed = (repeated: string[]) =>
      ({
        id: `${request.runId}-resumed`,
        runId: request.runId,
        seq: request.seq + 1,
        ts: request.ts,
        type: 'run.resumed',
        payload: {
          owner: 'host:1',
          fromSeq: request.seq,
          logPath: 'a.md',
          repeated,
          pausedMs: 0,
          discardedBytes: 0,
        },
      }) as const satisfies RunEvent;
    expect(callOf([...asked, resumed([request.id])])?.requestId).toBe(request.id);
    const answered = e.slice(0, answer + 1);
    expect(callOf([...answered, resumed([])])?.requestId).not.toBe(request.id);
  });

  it('shows every call in flight while steps run side by side, each as its step’s', () => {
    const e = demo.events;
    // The demo's steps 1 and 2 run at once: somewhere both have a call in flight.
    const both = [...e.keys()].find((k) => {
      const calls = buildRunView(e[0]!.runId, e.slice(0, k + 1)).calls;
      return calls.length === 2 && calls.every((c) => c.stepNumber !== null);
    });
    expect(both).toBeDefined();
    const prefix = e.slice(0, both! + 1);
    const calls = buildRunView(e[0]!.runId, prefix).calls;
    expect(calls.map((c) => c.stepNumber).sort()).toEqual([1, 2]);
    // Each is its step's latest request, oldest first.
    for (const call of calls) {
      const request = prefix.findLast(
        (x) =>
          x.type.endsWith('.requested') &&
          (x.payload as { input: { stepNumber?: number } }).input.stepNumber === call.stepNumber,
      );
      expect(call.requestId).toBe(request?.id);
    }
    expect(calls[0]!.since <= calls[1]!.since).toBe(true);
    // A cancelled call is in flight no more, and the closing event ends them all.
    const cancelled = {
      ...prefix.at(-1)!,
      seq: prefix.length + 1,
      id: `${e[0]!.runId}-c`,
      type: 'request.cancelled',
      payload: { requestId: calls[0]!.requestId, phase: 'work', reason: 'interrupted' },
    } as const satisfies RunEvent;
    expect(buildRunView(e[0]!.runId, [...prefix, cancelled]).calls.map((c) => c.requestId)).toEqual([
      calls[1]!.requestId,
    ]);
  });

  it('holds the plan, every attempt with its scores, the decisions and the usage', () => {
    const view = buildRunView(demo.events[0]!.runId, demo.events);
    expect(view.status).toBe('passed');
    expect(view.task).toBe('Write a short guide to brewing green tea');
    expect(view.plan?.steps.map((s) => s.status)).toEqual(['passed', 'passed', 'passed', 'passed']);
    // Steps 1 and 2 run side by side, so their events interleave: the view groups them by step.
    const byStep = <E extends { payload: { stepNumber: number } }>(events: E[]) =>
      events.toSorted((a, b) => a.payload.stepNumber - b.payload.stepNumber);
    const judged = byStep(demo.events.filter((e) => e.type === 'step.attempt.judged'));
    const attempts = view.steps.flatMap((s) => s.attempts);
    expect(attempts.map((a) => a.scores)).toEqual(judged.map((e) => e.payload.scores));
    const signals = view.steps.flatMap((s) => s.decisions.map((d) => d.signal));
    expect(signals).toEqual(
      byStep(demo.events.filter((e) => e.type === 'step.retry.scheduled')).map((e) => e.payload.signal),
    );
    expect(signals).toContain('refine');
    expect(signals).toContain('pivot');
    // The demo's first step needs an amendment before its contract is approved.
    expect(view.steps[0]!.rounds.map((r) => r.review?.status)).toEqual(['amendments_required', 'approved']);
    const completed = demo.events.at(-1) as Extract<RunEvent, { type: 'run.completed' }>;
    expect(view.totals.calls).toBe(completed.payload.usage.calls);
    expect(view.totals.promptTokens).toBe(completed.payload.usage.promptTokens);
    expect(view.phases.reduce((n, p) => n + p.completionTokens, 0)).toBe(
      completed.payload.usage.completionTokens,
    );
    expect(view.timeline).toHaveLength(demo.events.length);
  });

  it("counts each step's model calls and cost: the calls that answer its requests", () => {
    const view = buildRunView(demo.events[0]!.runId, demo.events);
    // Each call's request, told apart from the view's own bookkeeping: the step its input names.
    const stepOfRequest = new Map<string, number>();
    for (const e of demo.events)
      if (isRoleRequest(e) && e.type !== 'plan.requested')
        stepOfRequest.set(e.id, e.payload.input.stepNumber);
    const calls = demo.events.filter(
      (e): e is RunEventOf<'model.call.completed'> => e.type === 'model.call.completed',
    );
    for (const step of view.steps) {
      const mine = calls.filter((c) => stepOfRequest.get(c.payload.requestId) === step.stepNumber);
      expect(mine.length, `step ${step.stepNumber}'s calls`).toBeGreaterThan(0);
      expect(step.usage).toEqual({
        calls: mine.length,
        promptTokens: mine.reduce((n, c) => n + c.payload.promptTokens, 0),
        completionTokens: mine.reduce((n, c) => n + c.payload.completionTokens, 0),
        costUsd: mine.reduce((n, c) => n + c.payload.costUsd, 0),
        latencyMs: mine.reduce((n, c) => n + c.payload.latencyMs, 0),
      });
    }
    // Every call is the plan's or a step's.
    const planCalls = view.phases.find((p) => p.phase === 'plan')!.calls;
    expect(planCalls + view.steps.reduce((n, s) => n + s.usage.calls, 0)).toBe(view.totals.calls);
  });

  it('sums a run up for the run list: status, steps passed of total, cost, start and duration', () => {
    const runId = demo.events[0]!.runId;
    const ended = summarize(buildRunView(runId, demo.events));
    const completed = demo.events.at(-1) as RunEventOf<'run.completed'>;
    expect(ended).toEqual({
      runId,
      task: 'Write a short guide to brewing green tea',
      status: 'passed',
      waitingAt: null,
      stepsPassed: 4,
      stepsTotal: 4,
      costUsd: completed.payload.usage.costUsd,
      startedAt: demo.events[0]!.ts,
      updatedAt: completed.ts,
      durationMs: completed.payload.durationMs,
      events: demo.events.length,
    });
    // Midway: running, the steps passed so far, no duration yet (the page counts it from the start).
    const firstPass = demo.events.findIndex((e) => e.type === 'step.passed');
    const midway = summarize(buildRunView(runId, demo.events.slice(0, firstPass + 1)));
    expect(midway).toMatchObject({ status: 'running', stepsPassed: 1, stepsTotal: 4, durationMs: null });
    // At a gate: waiting, and which gate.
    const planned = upTo(demo.events, 'plan.created');
    const gate: RunEvent = {
      id: `${runId}-gate`,
      runId,
      seq: planned.at(-1)!.seq + 1,
      ts: planned.at(-1)!.ts,
      type: 'approval.requested',
      payload: { gate: 'plan', stepId: null, stepNumber: null, attempt: null, summary: 'the plan' },
    };
    expect(summarize(buildRunView(runId, [...planned, gate]))).toMatchObject({
      status: 'waiting',
      waitingAt: 'plan',
      stepsPassed: 0,
    });
    // Stopped: named as `pge runs` names it.
    const cancelled: RunEvent = {
      ...completed,
      type: 'run.failed',
      payload: { ...completed.payload, passed: false, reason: 'cancelled', message: 'cancelled by ada' },
    };
    expect(summarize(buildRunView(runId, [...demo.events.slice(0, -1), cancelled])).status).toBe('cancelled');
  });

  it('lists the runs waiting for a person first, then those running, then the ended ones, newest first', () => {
    const line = (runId: string, status: RunSummary['status'], updatedAt: string): RunSummary => ({
      runId,
      task: null,
      status,
      waitingAt: status === 'waiting' ? 'plan' : null,
      stepsPassed: 0,
      stepsTotal: null,
      costUsd: 0,
      startedAt: null,
      updatedAt,
      durationMs: null,
      events: 1,
    });
    const runs = [
      line('old-passed', 'passed', '2026-01-01T00:00:01Z'),
      line('running', 'running', '2026-01-01T00:00:09Z'),
      line('new-failed', 'failed', '2026-01-01T00:00:08Z'),
      line('old-waiting', 'waiting', '2026-01-01T00:00:02Z'),
      line('new-waiting', 'waiting', '2026-01-01T00:00:05Z'),
    ];
    expect(runs.sort(byAttention).map((r) => r.runId)).toEqual([
      'new-waiting',
      'old-waiting',
      'running',
      'new-failed',
      'old-passed',
    ]);
  });

  it('ends with the closing event: the store reports an event after it as a problem and shows it nowhere', async () => {
    const closing = demo.events.at(-1)!;
    const after = {
      id: `${closing.runId}-after`,
      runId: closing.runId,
      seq: closing.seq + 1,
      ts: closing.ts,
      type: 'step.started',
      payload: { stepId: 's9', stepNumber: 9, title: 'after the end' },
    } as const satisfies RunEvent;
    expect(afterClosingProblem(demo.events, after)).toBe(
      `run ${closing.runId}: step.started (seq ${after.seq}) came after the run's closing event run.completed (seq ${closing.seq}); it is not shown`,
    );
    expect(afterClosingProblem(demo.events.slice(0, -1), after)).toBeNull();
    const view = buildRunView(closing.runId, [...demo.events, after]);
    expect(view).toEqual(buildRunView(closing.runId, demo.events));
    const store = new RunStore();
    for (const event of [...demo.events, after]) store.add(event);
    await store.settled();
    expect(store.problems).toEqual([afterClosingProblem(demo.events, after)]);
    expect(store.view(closing.runId)!.timeline.map((t) => t.seq)).toEqual(demo.events.map((e) => e.seq));
    expect(store.view(closing.runId)!.steps.map((s) => s.stepNumber)).not.toContain(9);
  });

  it("names a continued run's job and shows a kept step as passed, not pending", () => {
    const [started, ...rest] = demo.events as [RunEventOf<'run.started'>, ...RunEvent[]];
    const plan = rest.find((e): e is RunEventOf<'plan.created'> => e.type === 'plan.created')!;
    const step = plan.payload.plan.steps[0]!;
    const kept: RunEvent = {
      id: `${started.runId}-kept`,
      runId: started.runId,
      seq: plan.seq + 1,
      ts: plan.ts,
      type: 'step.carried',
      payload: { stepId: step.id, stepNumber: 1, title: step.title, fromRunId: 'run-first' },
    };
    const continued: RunEventOf<'run.started'> = {
      ...started,
      payload: {
        ...started.payload,
        job: { id: 'run-first', run: 2 },
        continues: { runId: 'run-first', logPath: '/logs/first.md', carried: [] },
      },
    };
    const view = buildRunView(started.runId, [continued, ...upTo(rest, 'plan.created'), kept]);
    expect(view.job).toEqual({ id: 'run-first', run: 2, continues: 'run-first' });
    expect(view.steps.map((s) => [s.stepId, s.status, s.keptFrom])).toEqual([
      [step.id, 'passed', 'run-first'],
    ]);
    expect(view.plan!.steps[0]!.status).toBe('passed');
    // A run of its own job names itself, run 1, continuing nothing.
    expect(buildRunView(started.runId, demo.events).job).toEqual({
      id: started.runId,
      run: 1,
      continues: null,
    });
  });

  it('shows a run seen from the middle', () => {
    const view = buildRunView('late', demo.events.slice(20));
    expect(view.task).toBeNull();
    expect(view.status).toBe('passed');
    expect(view.steps.map((s) => s.stepNumber)).toEqual([3, 4]);
  });
});

describe('log prefix', () => {
  it('parses every cut of a log into a prefix of its events, never an error', () => {
    const { text, events } = demo;
    let previous = 0;
    for (let end = 0; end <= text.length; end += 61) {
      const { events: parsed } = parseLogPrefix(text.slice(0, end));
      expect(parsed).toEqual(events.slice(0, parsed.length));
      expect(parsed.length).toBeGreaterThanOrEqual(previous);
      previous = parsed.length;
    }
    expect(parseLogPrefix(text)).toEqual({ events, error: null });
  });

  it('stops a log at its closing event and says why an event after it does not parse', () => {
    const closing = demo.events.at(-1)!;
    const after = { ...demo.events[5]!, seq: closing.seq + 1 } as RunEvent;
    const { events, error } = parseLogPrefix(demo.text + renderEvent(after));
    expect(events).toEqual(demo.events);
    expect(error?.message).toMatch(/comes after the run's closing event run\.completed/);
  });

  it('says why a log that is not whole does not parse', () => {
    const cut = demo.text.slice(0, demo.text.lastIndexOf('```'));
    const { events, error } = parseLogPrefix(cut);
    expect(events).toEqual(demo.events.slice(0, -1));
    expect(error?.message).toMatch(/never closed/);
  });
});
