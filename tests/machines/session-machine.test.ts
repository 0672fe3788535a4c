import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { assign, createActor, createMachine, toPromise } from 'xstate';
import { ResumeError, RunTakenOverError } from '../../src/errors.js';
import type { RunInput, RunOutcome, runMachine } from '../../src/machines/run-machine.js';
import { type SessionInput, sessionMachine } from '../../src/machines/session-machine.js';
import type { ApprovalDecision } from '../../src/schemas/index.js';
import { runInput } from '../support/chart-fixtures.js';

/**
 * The session chart on its own, with a stand-in run chart and its actions recorded: deadlines
 * under fake timers, results and decisions as events, replay to live, takeover and divergence,
 * and the output of each final state.
 */

const OUTCOME = { status: 'completed' } as RunOutcome;

/** A stand-in run chart: ends on `finish`, is interrupted by `interrupt`, fails on `boom`; notes what it gets. */
function standInRun(seen: unknown[]) {
  return createMachine({
    types: {} as { context: { reason: string | null } },
    id: 'run',
    context: { reason: null },
    initial: 'going',
    output: ({ context }) => ({ ...OUTCOME, reason: context.reason }),
    states: {
      going: {
        on: {
          '*': { actions: ({ event }) => void seen.push(event) },
          finish: 'done',
          interrupt: {
            target: 'done',
            actions: [
              ({ event }) => void seen.push(event),
              assign({ reason: ({ event }) => (event as { reason?: string }).reason ?? null }),
            ],
          },
          boom: {
            actions: () => {
              throw new ResumeError('the log and its replay disagree');
            },
          },
        },
      },
      done: { type: 'final' },
    },
  });
}

/** A session with the stand-in run and its actions noted in `calls`. */
function session(input: Partial<SessionInput> = {}, approvalDeadline?: RunInput['approvalDeadline']) {
  const calls: [string, unknown][] = [];
  const runEvents: unknown[] = [];
  const note = (name: string) => (_: unknown, params: unknown) => void calls.push([name, params]);
  const machine = sessionMachine.provide({
    actions: {
      settleDecision: note('settleDecision'),
      letGo: note('letGo'),
    },
    actors: { run: standInRun(runEvents) as unknown as typeof runMachine },
  });
  const actor = createActor(machine, {
    input: {
      runId: 'run-1',
      run: { ...runInput({ approvalDeadline }), startedAt: 0 },
      replaying: false,
      ...input,
    },
  });
  const output = toPromise(actor);
  actor.start();
  const value = () => actor.getSnapshot().value;
  const runChild = () => actor.getSnapshot().children.run;
  return { actor, calls, runEvents, output, value, runChild };
}

const APPROVE: ApprovalDecision = { decision: 'approve', reason: null, by: 'ana' };

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('the session chart', () => {
  it("goes live at once for a new run, and closes with the run's outcome", async () => {
    const s = session();
    expect(s.value()).toEqual({ open: { live: 'working' } });
    s.runChild()!.send({ type: 'finish' } as never);
    expect(s.actor.getSnapshot().value).toBe('closed');
    expect((await s.output).outcome).toMatchObject({ status: 'completed' });
  });

  it('replays a resumed run until the recorded events run out, then is live', () => {
    const s = session({ replaying: true });
    expect(s.value()).toEqual({ open: 'replaying' });
    // No gate is waited at while replaying: the log decides them.
    const gate = {
      type: 'approval.requested',
      gate: 'plan',
      requestId: 'r-1',
      requestedAt: 0,
      now: 0,
    } as const;
    expect(s.actor.getSnapshot().can(gate)).toBe(false);
    s.actor.send({ type: 'replay.ended' });
    expect(s.value()).toEqual({ open: { live: 'working' } });
  });

  it("takes a person's decision as an event, for the gate it waits at only", () => {
    const s = session();
    s.actor.send({ type: 'approval.requested', gate: 'plan', requestId: 'a-1', requestedAt: 0, now: 0 });
    expect(s.value()).toEqual({ open: { live: { awaitingDecision: 'untimed' } } });
    expect(s.actor.getSnapshot().hasTag('waiting')).toBe(true);
    const snapshot = s.actor.getSnapshot();
    expect(snapshot.can({ type: 'decide', gate: 'step', decision: APPROVE, now: 0 })).toBe(false);
    expect(snapshot.can({ type: 'decide', gate: 'plan', decision: APPROVE, requestId: 'a-2', now: 0 })).toBe(
      false,
    );
    // Without a deadline the gate waits as long as it takes.
    vi.advanceTimersByTime(24 * 3_600_000);
    expect(s.calls).toEqual([]);
    s.actor.send({ type: 'decide', gate: 'plan', decision: APPROVE, requestId: 'a-1', now: 0 });
    expect(s.calls).toEqual([['settleDecision', { requestId: 'a-1', decision: APPROVE }]]);
    expect(s.value()).toEqual({ open: { live: 'working' } });
    expect(s.actor.getSnapshot().hasTag('waiting')).toBe(false);
  });

  it("decides at the approval deadline, counted from the request's recorded time", () => {
    const s = session({}, { timeoutMs: 1_000, policy: 'reject' });
    // The request was recorded 400 ms before this process began to wait (a restart): 600 ms are left.
    s.actor.send({
      type: 'approval.requested',
      gate: 'step',
      requestId: 'a-1',
      requestedAt: 5_000,
      now: 5_400,
    });
    expect(s.value()).toEqual({ open: { live: { awaitingDecision: 'timed' } } });
    vi.advanceTimersByTime(599);
    expect(s.calls).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(s.calls).toEqual([
      [
        'settleDecision',
        {
          requestId: 'a-1',
          decision: { decision: 'reject', reason: 'no decision within 1000 ms', by: 'deadline' },
        },
      ],
    ]);
    expect(s.value()).toEqual({ open: { live: 'working' } });
  });

  it('waits at the gates of steps side by side at once, each decided on its own, each with its deadline', () => {
    const s = session({}, { timeoutMs: 1_000, policy: 'approve' });
    const REJECT: ApprovalDecision = { decision: 'reject', reason: 'no', by: 'ana' };
    s.actor.send({ type: 'approval.requested', gate: 'contract', requestId: 'a-1', requestedAt: 0, now: 0 });
    vi.advanceTimersByTime(300);
    s.actor.send({
      type: 'approval.requested',
      gate: 'contract',
      requestId: 'a-2',
      requestedAt: 300,
      now: 300,
    });
    expect(s.actor.getSnapshot().context.gates.map((g) => g.requestId)).toEqual(['a-1', 'a-2']);
    // A decision without a request goes to the oldest gate of its kind; the other waits on.
    s.actor.send({ type: 'decide', gate: 'contract', decision: REJECT, now: 400 });
    expect(s.calls).toEqual([['settleDecision', { requestId: 'a-1', decision: REJECT }]]);
    expect(s.value()).toEqual({ open: { live: { awaitingDecision: 'timed' } } });
    // a-2's deadline is 1,000 ms after its request: 300 + 1,000, not counted again from the decision.
    vi.advanceTimersByTime(899);
    expect(s.calls).toHaveLength(1);
    vi.advanceTimersByTime(1);
    expect(s.calls[1]).toEqual([
      'settleDecision',
      {
        requestId: 'a-2',
        decision: { decision: 'approve', reason: 'no decision within 1000 ms', by: 'deadline' },
      },
    ]);
    expect(s.value()).toEqual({ open: { live: 'working' } });
  });

  it('lets a gate go whose step was stopped, and waits on at the others', () => {
    const s = session();
    s.actor.send({ type: 'approval.requested', gate: 'step', requestId: 'a-1', requestedAt: 0, now: 0 });
    s.actor.send({ type: 'approval.requested', gate: 'step', requestId: 'a-2', requestedAt: 0, now: 0 });
    s.actor.send({ type: 'approval.left', requestId: 'a-1', now: 10 });
    expect(s.actor.getSnapshot().context.gates.map((g) => g.requestId)).toEqual(['a-2']);
    expect(s.value()).toEqual({ open: { live: { awaitingDecision: 'untimed' } } });
    s.actor.send({ type: 'approval.left', requestId: 'a-2', now: 20 });
    expect(s.value()).toEqual({ open: { live: 'working' } });
  });

  it('interrupts the run at the deadline under the stop policy, and takes no decision after it', async () => {
    const s = session({}, { timeoutMs: 1_000, policy: 'stop' });
    s.actor.send({ type: 'approval.requested', gate: 'contract', requestId: 'a-1', requestedAt: 0, now: 0 });
    vi.advanceTimersByTime(1_000);
    expect(s.runEvents).toContainEqual({
      type: 'interrupt',
      reason: 'the contract gate had no decision within 1000 ms',
    });
    expect(s.calls).toEqual([]);
    expect(s.actor.getSnapshot().value).toBe('closed');
    expect((await s.output).outcome).toMatchObject({
      reason: 'the contract gate had no decision within 1000 ms',
    });
  });

  it('passes an interrupt and a failed publish to the run chart', async () => {
    const s = session();
    s.actor.send({ type: 'publish.failed', error: new Error('the transport refused it') });
    expect(s.runEvents).toEqual([
      { type: 'interrupt', reason: 'its events could not be published: Error: the transport refused it' },
    ]);
    expect((await s.output).outcome).toMatchObject({ status: 'completed' });
  });

  it('lets the run go when its lease is lost: letGo, the run chart stopped, the error as output', async () => {
    const s = session();
    const child = s.runChild()!;
    const error = new RunTakenOverError('run run-1 was taken over by c2');
    s.actor.send({ type: 'abandon', owner: 'c2', error });
    expect(s.actor.getSnapshot().value).toBe('takenOver');
    expect(s.calls).toEqual([['letGo', { owner: 'c2', error }]]);
    expect(child.getSnapshot().status).toBe('stopped');
    expect(await s.output).toEqual({ error });
  });

  it('ends diverged, with the divergence as output, once the run chart has failed on it', async () => {
    const s = session({ replaying: true });
    const divergence = new ResumeError('the log has plan.created here');
    s.actor.send({ type: 'diverged', error: divergence });
    expect(s.value()).toEqual({ open: 'diverging' });
    // The run chart fails at its next event (the recorder refuses everything after a divergence).
    s.runChild()!.send({ type: 'boom' } as never);
    expect(s.actor.getSnapshot().value).toBe('diverged');
    expect(await s.output).toEqual({ error: divergence });
  });

  it('ends failed, with the error as output, when the run chart fails', async () => {
    const s = session();
    s.runChild()!.send({ type: 'boom' } as never);
    expect(s.actor.getSnapshot().value).toBe('failed');
    const { error } = await s.output;
    expect(error).toBeInstanceOf(ResumeError);
  });
});
