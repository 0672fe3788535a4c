import { afterEach, describe, expect, it, vi } from 'vitest';
import { createActor, fromPromise, toPromise } from 'xstate';
import { runMachine } from '../../src/machines/run-machine.js';
import { stepMachine } from '../../src/machines/step-machine.js';
import type {
  ContractReviewInput,
  RecordParams,
  ReviewOutput,
  WorkInput,
  WorkOutput,
} from '../../src/machines/types.js';
import { CALL_USAGE, makePlan, runInput } from '../support/chart-fixtures.js';

/** Model calls are invoked actors: each state that needs one invokes it, and leaving the state stops it. */

/** A run whose planner answers at once and whose first step hangs in `doWork` until aborted. */
function runWithHangingWork(
  onAbort: (input: WorkInput, reason: unknown) => void,
  timeOutCall: (call: string, caller: unknown) => void = () => {},
) {
  const recorded: RecordParams[] = [];
  // The charts' deadline action, as the composition root provides it: it finds the call among
  // the children of the actor whose state made it.
  const timeOut = {
    timeOutCall: (
      { self }: { self: { getSnapshot(): { children: Record<string, unknown> } } },
      { call }: { call: string },
    ) => timeOutCall(call, self.getSnapshot().children[call]),
  };
  const steps = stepMachine.provide({
    actions: { record: (_, p: RecordParams) => void recorded.push(p), ...timeOut },
    actors: {
      proposeContract: fromPromise(async ({ input }) => ({
        proposal: {
          title: input.step.title,
          acceptanceCriteria: ['basics'],
          expectedOutput: 'x',
          verificationMethod: 'read',
        },
        usage: CALL_USAGE,
        finishedAt: 1,
      })),
      reviewContract: fromPromise<ReviewOutput, ContractReviewInput>(async () => ({
        review: { status: 'approved', amendments: [], rationale: 'ok' },
        usage: CALL_USAGE,
        finishedAt: 2,
      })),
      doWork: fromPromise<WorkOutput, WorkInput>(
        ({ input, signal }) =>
          new Promise((_, reject) => {
            signal.addEventListener('abort', () => {
              onAbort(input, signal.reason);
              reject(signal.reason);
            });
          }),
      ),
    },
  });
  const machine = runMachine.provide({
    actions: { record: (_, p: RecordParams) => void recorded.push(p), ...timeOut },
    actors: {
      runStep: steps,
      plan: fromPromise(async () => ({ plan: makePlan(), usage: CALL_USAGE, finishedAt: 1 })),
    },
  });
  return { machine, recorded };
}

describe('model calls as invoked actors', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("times a call out when its state's deadline passes (after callDeadline), not a moment before", async () => {
    vi.useFakeTimers();
    const timedOut: { call: string; caller: unknown }[] = [];
    const { machine } = runWithHangingWork(
      () => {},
      (call, caller) => timedOut.push({ call, caller }),
    );
    const actor = createActor(machine, { input: runInput({ callTimeoutMs: 1_000 }) }).start();
    await vi.advanceTimersByTimeAsync(0);
    const step = Object.values(actor.getSnapshot().children)[0]!;
    const work = (step.getSnapshot() as { children: Record<string, unknown> }).children.doWork;
    expect(work).toBeDefined();
    await vi.advanceTimersByTimeAsync(999);
    expect(timedOut).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    // The action is handed the very call actor the state invoked, which it cancels and fails.
    expect(timedOut).toEqual([{ call: 'doWork', caller: work }]);
    // Targetless: the state stays until the call fails; the deadline does not fire again.
    await vi.advanceTimersByTimeAsync(5_000);
    expect(timedOut).toHaveLength(1);
    actor.stop();
  });

  it('cancels the deadline of a call answered in time', async () => {
    vi.useFakeTimers();
    const timedOut: string[] = [];
    const { machine } = runWithHangingWork(
      () => {},
      (call) => timedOut.push(call),
    );
    // The planner, proposal and review answer at once, each well within its deadline.
    const actor = createActor(machine, { input: runInput({ callTimeoutMs: 1_000 }) }).start();
    await vi.advanceTimersByTimeAsync(999);
    // Only the hanging work call is still timed: none of the answered calls' deadlines fires.
    await vi.advanceTimersByTimeAsync(1);
    expect(timedOut).toEqual(['doWork']);
    actor.stop();
  });

  it('shows the call as a child actor of the state that made it', async () => {
    const { machine } = runWithHangingWork(() => {});
    const actor = createActor(machine, { input: runInput() }).start();
    await new Promise((resolve) => setTimeout(resolve, 0));
    const step = Object.values(actor.getSnapshot().children)[0]!;
    const stepSnapshot = step.getSnapshot() as { value: unknown; children: Record<string, unknown> };
    expect(stepSnapshot.value).toEqual({ executing: 'firstAttempt' });
    const children = Object.values(stepSnapshot.children) as { src: unknown }[];
    expect(children.map((c) => c.src)).toEqual(['doWork']);
    actor.stop();
  });

  it('aborts the call actor when an interrupt leaves its state, after the closing event', async () => {
    const aborted: { attempt: number; recordedBefore: string[] }[] = [];
    const { machine, recorded } = runWithHangingWork((input) =>
      aborted.push({ attempt: input.attempt, recordedBefore: recorded.map((r) => r.type) }),
    );
    const actor = createActor(machine, { input: runInput() }).start();
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(aborted).toEqual([]);
    actor.send({ type: 'interrupt', reason: 'operator' });
    const outcome = await toPromise(actor);
    expect(outcome.status).toBe('interrupted');
    expect(aborted.map((a) => a.attempt)).toEqual([1]);
    // The closing event was recorded before the actor was stopped: a cancel comes after it.
    expect(aborted[0]!.recordedBefore.at(-1)).toBe('run.failed');
    expect(recorded.at(-1)?.type).toBe('run.failed');
  });

  it('fails a chart whose calls were not provided through the invoke error, naming the call', async () => {
    const recorded: string[] = [];
    const machine = runMachine.provide({
      actions: { record: (_, p: { type: string }) => void recorded.push(p.type) },
    });
    const outcome = await toPromise(createActor(machine, { input: runInput() }).start());
    expect(outcome.status).toBe('failed');
    expect(outcome.error?.message).toContain('the call actor "plan" must be provided');
    expect(recorded).toEqual(['run.failed']);
  });
});
