import { describe, expect, it } from 'vitest';
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
function runWithHangingWork(onAbort: (input: WorkInput, reason: unknown) => void) {
  const recorded: RecordParams[] = [];
  const steps = stepMachine.provide({
    actions: { record: (_, p: RecordParams) => void recorded.push(p) },
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
    actions: { record: (_, p: RecordParams) => void recorded.push(p) },
    actors: {
      runStep: steps,
      plan: fromPromise(async () => ({ plan: makePlan(), usage: CALL_USAGE, finishedAt: 1 })),
    },
  });
  return { machine, recorded };
}

describe('model calls as invoked actors', () => {
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
