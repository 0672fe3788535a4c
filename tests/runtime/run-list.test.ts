import { describe, expect, it } from 'vitest';
import type { StoredMessages } from '../../src/bus/bus.js';
import { subjectMatches, subjects } from '../../src/bus/subjects.js';
import { listRuns, TASK_CHARS, taskLine } from '../../src/runtime/run-list.js';
import type { RunEvent, RunEventDraft, RunEventOf, RunStopReason } from '../../src/schemas/index.js';
import { stoppedStatus } from '../../src/schemas/run-status.js';
import { fullRun, makeEvent } from '../persistence/fixtures.js';

/**
 * `listRuns` over a stream held in memory with the semantics of PGE_EVENTS as a client reads it:
 * each event on `pge.run.<runId>.evt.<type>`, a filter matched as NATS matches it, one lookup per
 * message read plus the one that finds no more (`NatsBus.stored`), one for a last-message read.
 * The runs are the fixture run of the log tests (31 schema-checked events, one step), cut or
 * closed in the ways a deployment's runs end.
 */

class MemoryStream implements StoredMessages {
  readonly events: RunEvent[] = [];
  readonly filters: string[] = [];
  lookups = 0;

  add(events: readonly RunEvent[], startMs: number): void {
    // Each run its own start: the fixture stamps event n at 10:00:00 + n s.
    const shift = startMs - Date.parse(events[0]!.ts);
    for (const e of events) this.events.push({ ...e, ts: new Date(Date.parse(e.ts) + shift).toISOString() });
  }

  private matching(filter: string): RunEvent[] {
    return this.events.filter((e) => subjectMatches(filter, subjects.event(e.runId, e.type)));
  }

  async stored(subject: string): Promise<unknown[]> {
    this.filters.push(subject);
    const found = this.matching(subject);
    this.lookups += found.length + 1;
    return found;
  }

  async lastStored(subject: string): Promise<unknown | null> {
    this.filters.push(subject);
    this.lookups += 1;
    return this.matching(subject).at(-1) ?? null;
  }
}

const T = Date.parse('2026-11-28T08:00:00.000Z');
const MIN = 60_000;
const COST = 0.0031;

/** The fixture run, its closing event replaced by `closing` (or left off: a run still going). */
function runOf(
  runId: string,
  closing: RunEventDraft['type'] | null,
  draft?: Partial<RunEventDraft>,
): RunEvent[] {
  const events = fullRun(runId);
  const body = events.slice(0, -1);
  if (closing === null) return body;
  const totals = events.at(-1)!.payload as object;
  return [
    ...body,
    makeEvent(runId, body.length + 1, { type: closing, payload: { ...totals }, ...draft } as RunEventDraft),
  ];
}

/** The fixture run up to its plan, then waiting at the plan's gate (decided `decided` times before). */
function waitingRun(runId: string): RunEvent[] {
  const upToPlan = fullRun(runId).slice(0, 4);
  expect(upToPlan.at(-1)!.type).toBe('plan.created');
  return [
    ...upToPlan,
    makeEvent(runId, 5, {
      type: 'approval.requested',
      payload: { gate: 'plan', stepId: null, stepNumber: null, attempt: null, summary: 'one step' },
    }),
  ];
}

const failed = (reason: string) => ({
  payload: {
    ...(fullRun('x').at(-1)!.payload as object),
    passed: false,
    reason,
    message: `stopped: ${reason}`,
  },
});

function deployment(): MemoryStream {
  const stream = new MemoryStream();
  stream.add(runOf('r-passed', 'run.completed'), T);
  stream.add(runOf('r-budget', 'run.failed', failed('budget') as never), T + 1 * MIN);
  stream.add(waitingRun('r-waiting'), T + 2 * MIN);
  stream.add(runOf('r-running', null), T + 3 * MIN);
  stream.add(runOf('r-error', 'run.failed', failed('error') as never), T + 4 * MIN);
  return stream;
}

describe('listRuns', () => {
  it('lists every run oldest first, each with its status, steps, cost, start and latest event', async () => {
    const runs = await listRuns(deployment());
    expect(runs.map((r) => [r.runId, r.status, r.stepsPassed, r.stepsTotal])).toEqual([
      ['r-passed', 'passed', 1, 1],
      ['r-budget', 'stopped', 1, 1],
      ['r-waiting', 'waiting', 0, 1],
      ['r-running', 'running', 1, 1],
      ['r-error', 'failed', 1, 1],
    ]);
    const task = 'Write a haiku about the sea, then explain its imagery.';
    expect(runs[0]).toEqual({
      runId: 'r-passed',
      job: { id: 'r-passed', run: 1 },
      task,
      status: 'passed',
      stepsPassed: 1,
      stepsTotal: 1,
      costUsd: (fullRun('x').at(-1)!.payload as { usage: { costUsd: number } }).usage.costUsd,
      startedAt: new Date(T).toISOString(),
      lastEventAt: new Date(T + 30_000).toISOString(),
      lastEvent: 'run.completed',
    });
    // An open run: its cost is the sum of its model calls, its latest event the one before the end.
    const calls = fullRun('x').filter((e) => e.type === 'model.call.completed').length;
    expect(runs[3]).toMatchObject({ costUsd: expect.closeTo(calls * COST, 10), lastEvent: 'step.passed' });
    expect(runs[2]).toMatchObject({ lastEvent: 'approval.requested', costUsd: COST });
  });

  it("names a continued run's job, and counts its kept steps as passed while it runs", async () => {
    const stream = new MemoryStream();
    // Run 2 of job r-first: its plan's one step was kept from run r-first, and nothing else has happened.
    const [started, requested, , created] = fullRun('r-next');
    expect([started!.type, created!.type]).toEqual(['run.started', 'plan.created']);
    const head = started as Extract<RunEvent, { type: 'run.started' }>;
    const step = (created as Extract<RunEvent, { type: 'plan.created' }>).payload.plan.steps[0]!;
    stream.add(
      [
        { ...head, payload: { ...head.payload, job: { id: 'r-first', run: 2 } } },
        { ...created!, seq: 2 },
        makeEvent('r-next', 3, {
          type: 'step.carried',
          payload: { stepId: step.id, stepNumber: 1, title: step.title, fromRunId: 'r-first' },
        }),
      ],
      T,
    );
    expect(requested!.type).toBe('plan.requested');
    const [run] = await listRuns(stream);
    expect(run).toMatchObject({
      runId: 'r-next',
      job: { id: 'r-first', run: 2 },
      status: 'running',
      stepsPassed: 1,
      stepsTotal: 1,
      lastEvent: 'step.carried',
    });
  });

  it("keeps one job's runs, its first run included, reading no other open run", async () => {
    const stream = deployment();
    // Run 2 of job r-budget ended; run 3 is still going.
    const second = runOf('r-budget-2', 'run.completed');
    const third = runOf('r-budget-3', null);
    for (const [run, n] of [
      [second, 2],
      [third, 3],
    ] as const) {
      const head = run[0] as RunEventOf<'run.started'>;
      run[0] = { ...head, payload: { ...head.payload, job: { id: 'r-budget', run: n } } };
    }
    stream.add(second, T + 10 * MIN);
    stream.add(third, T + 11 * MIN);
    // A run whose start the stream no longer holds: its job is not known, so it is not the job's.
    stream.add(runOf('r-old', 'run.completed').slice(-1), T + 12 * MIN);
    const runs = await listRuns(stream, { job: 'r-budget' });
    expect(runs.map((r) => [r.runId, r.job?.run, r.status])).toEqual([
      ['r-budget', 1, 'stopped'],
      ['r-budget-2', 2, 'passed'],
      ['r-budget-3', 3, 'running'],
    ]);
    // Only the job's open run is read beyond the run-level events.
    expect(
      new Set(stream.filters.filter((f) => !f.startsWith('pge.run.*.')).map((f) => f.split('.')[2])),
    ).toEqual(new Set(['r-budget-3']));
    expect(await listRuns(stream, { job: 'r-budget-2' })).toEqual([]);
    expect((await listRuns(stream, { job: 'r-budget', statuses: ['running'] })).map((r) => r.runId)).toEqual([
      'r-budget-3',
    ]);
  });

  it('reads one run-level filter for runs that ended, and the events that say where an open one stands', async () => {
    const stream = deployment();
    const closedOnly = new MemoryStream();
    closedOnly.events.push(...stream.events.filter((e) => !['r-waiting', 'r-running'].includes(e.runId)));
    await listRuns(closedOnly);
    expect(closedOnly.filters).toEqual(['pge.run.*.evt.run.>']);
    // Two run-level events a run, and the lookup that finds no more.
    expect(closedOnly.lookups).toBe(3 * 2 + 1);

    await listRuns(stream);
    const perRun = stream.filters.filter((f) => !f.startsWith('pge.run.*.'));
    expect(new Set(perRun.map((f) => f.split('.')[2]))).toEqual(new Set(['r-waiting', 'r-running']));
    // Far fewer lookups than the events the stream holds.
    expect(stream.lookups).toBeLessThan(stream.events.length / 2);
  });

  it('keeps the statuses and the start a filter asks for, reading no open run for ended statuses', async () => {
    const stream = deployment();
    const ended = await listRuns(stream, { statuses: ['failed', 'stopped'] });
    expect(ended.map((r) => r.runId)).toEqual(['r-budget', 'r-error']);
    expect(stream.filters).toEqual(['pge.run.*.evt.run.>']);
    expect((await listRuns(stream, { statuses: ['waiting'] })).map((r) => r.runId)).toEqual(['r-waiting']);
    expect((await listRuns(stream, { statuses: ['running'] })).map((r) => r.runId)).toEqual(['r-running']);
    expect((await listRuns(stream, { since: T + 2 * MIN })).map((r) => r.runId)).toEqual([
      'r-waiting',
      'r-running',
      'r-error',
    ]);
    expect(await listRuns(stream, { statuses: ['passed'], since: T + 1 })).toEqual([]);
  });

  it('a decided gate leaves the run running; an ended run waits at no gate', async () => {
    const stream = deployment();
    const request = stream.events.find((e) => e.type === 'approval.requested')!;
    stream.add(
      [
        makeEvent('r-waiting', 6, {
          type: 'approval.decided',
          payload: { requestId: request.id, gate: 'plan', decision: 'approve', reason: null, by: 'ana' },
        }),
      ],
      T + 10 * MIN,
    );
    expect((await listRuns(stream)).find((r) => r.runId === 'r-waiting')!.status).toBe('running');

    const interrupted = new MemoryStream();
    const waiting = waitingRun('r-int');
    interrupted.add(
      [...waiting, makeEvent('r-int', 6, { type: 'run.failed', ...failed('interrupted') } as never)],
      T,
    );
    expect((await listRuns(interrupted))[0]).toMatchObject({
      status: 'interrupted',
      lastEvent: 'run.failed',
    });
  });

  it('shows a stop reason it does not name as the reason itself', async () => {
    expect(stoppedStatus('budget')).toBe('stopped');
    expect(stoppedStatus('error')).toBe('failed');
    expect(stoppedStatus('aborted')).toBe('aborted');
    expect(stoppedStatus('cancelled' as RunStopReason)).toBe('cancelled');
    // A newer coordinator's reason, in an event this reader's schema was not asked to check.
    const stream = new MemoryStream();
    const run = runOf('r-new', 'run.failed', failed('aborted') as never);
    stream.add(
      [
        ...run.slice(0, -1),
        { ...run.at(-1)!, payload: { ...run.at(-1)!.payload, reason: 'cancelled' } } as RunEvent,
      ],
      T,
    );
    expect((await listRuns(stream, { statuses: ['cancelled'] }))[0]).toMatchObject({ status: 'cancelled' });
  });

  it('counts no steps of a run that ended before its plan, and a plan of a run still open', async () => {
    const stream = new MemoryStream();
    const { payload } = failed('error');
    const start = fullRun('r-noplan').slice(0, 3);
    const end = { type: 'run.failed', payload: { ...payload, stepsPassed: 0, stepsTotal: 0 } };
    stream.add([...start, makeEvent('r-noplan', 4, end as RunEventDraft)], T);
    stream.add(fullRun('r-planning').slice(0, 3), T + MIN);
    expect((await listRuns(stream)).map((r) => [r.runId, r.status, r.stepsPassed, r.stepsTotal])).toEqual([
      ['r-noplan', 'failed', 0, null],
      ['r-planning', 'running', 0, null],
    ]);
  });

  it('cuts the task to one short line, and lists a run whose start the stream no longer holds', async () => {
    expect(taskLine('  first line\nsecond line')).toBe('first line');
    const long = 'x'.repeat(200);
    expect(taskLine(long)).toHaveLength(TASK_CHARS);
    expect(taskLine(long).endsWith('…')).toBe(true);

    const stream = new MemoryStream();
    // The stream's limits removed the run's first events; its resume and its end are left.
    const run = runOf('r-old', 'run.completed');
    const resumed = makeEvent('r-old', 29, {
      type: 'run.resumed',
      payload: {
        owner: 'coord-b',
        fromSeq: 28,
        logPath: '/tmp/x.md',
        repeated: [],
        pausedMs: 0,
        discardedBytes: 0,
      },
    });
    stream.add([resumed, run.at(-1)!], T);
    expect((await listRuns(stream))[0]).toMatchObject({
      runId: 'r-old',
      task: null,
      status: 'passed',
      startedAt: new Date(T).toISOString(),
    });
  });
});
