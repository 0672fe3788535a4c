import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createActor, fromPromise, toPromise } from 'xstate';
import { type RunInput, type RunOutcome, runMachine } from '../../src/machines/run-machine.js';
import { stepMachine } from '../../src/machines/step-machine.js';
import type {
  ContractInput,
  ContractReviewInput,
  EvaluateOutput,
  EvaluationInput,
  RecordParams,
  WorkInput,
  WorkOutput,
} from '../../src/machines/types.js';
import type { Evaluation, Plan } from '../../src/schemas/index.js';
import { APPROVED, CALL_USAGE, makePlan, runInput, scored } from '../support/chart-fixtures.js';

/**
 * Steps side by side (issue #34): the run chart starts each ready step (its dependencies ended)
 * while a slot is free, each its own step chart, under fake timers where every call takes
 * `CALL_MS`. The plan is two chains: a → c and b → d.
 */

const CALL_MS = 400;

/** a and b need nothing; c needs a, d needs b. */
function chains(): Plan {
  const plan = makePlan(['a', 'b', 'c', 'd']);
  const needs: Record<string, string[]> = { a: [], b: [], c: ['a'], d: ['b'] };
  return { ...plan, steps: plan.steps.map((s) => ({ ...s, dependsOn: needs[s.id]! })) };
}

interface Harness {
  outcome: Promise<RunOutcome>;
  actor: ReturnType<typeof createActor<typeof runMachine>>;
  events: RecordParams[];
  /** `[virtual ms, step id, call]` of each call as it starts. */
  starts: [number, string, string][];
  /** Calls whose actor was stopped before their answer, by step id. */
  aborted: string[];
  work: WorkInput[];
  /** Most step calls in flight at once. */
  peak: () => number;
}

/**
 * The run chart with calls that each take `CALL_MS` of fake time. `evaluate` scores a step's
 * attempt (default: passing); `planOf` gives the plans in turn.
 */
function harness(
  overrides: Partial<RunInput>,
  evaluate: (stepId: string, attempt: number) => Evaluation = () => scored(8, 7),
  plans: Plan[] = [chains(), chains()],
): Harness {
  const events: RecordParams[] = [];
  const starts: Harness['starts'] = [];
  const aborted: string[] = [];
  const work: WorkInput[] = [];
  let inFlight = 0;
  let peak = 0;
  const started = Date.now();
  /** A call of step `stepId` that answers `answer()` after `CALL_MS`, unless its actor is stopped first. */
  const call = <T>(stepId: string, name: string, signal: AbortSignal, answer: () => T): Promise<T> => {
    starts.push([Date.now() - started, stepId, name]);
    inFlight++;
    peak = Math.max(peak, inFlight);
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        inFlight--;
        resolve(answer());
      }, CALL_MS);
      signal.addEventListener('abort', () => {
        clearTimeout(timer);
        inFlight--;
        aborted.push(stepId);
        reject(signal.reason);
      });
    });
  };
  const report = () => ({ usage: CALL_USAGE, finishedAt: Date.now() });
  const record = (_: unknown, params: RecordParams) => void events.push(params);
  const steps = stepMachine.provide({
    actions: { record },
    actors: {
      proposeContract: fromPromise(({ input, signal }: { input: ContractInput; signal: AbortSignal }) =>
        call(input.step.id, 'proposeContract', signal, () => ({
          proposal: {
            title: input.step.title,
            acceptanceCriteria: ['covers it'],
            expectedOutput: input.step.expectedOutput,
            verificationMethod: 'read it',
          },
          ...report(),
        })),
      ),
      reviewContract: fromPromise(({ input, signal }: { input: ContractReviewInput; signal: AbortSignal }) =>
        call(input.step.id, 'reviewContract', signal, () => ({ review: APPROVED, ...report() })),
      ),
      doWork: fromPromise(({ input, signal }: { input: WorkInput; signal: AbortSignal }) => {
        work.push(input);
        return call<WorkOutput>(input.step.id, 'doWork', signal, () => ({
          work: { output: `work of ${input.step.id}`, notes: '', selfAssessment: [] },
          problem: null,
          validation: null,
          ...report(),
        }));
      }),
      evaluateWork: fromPromise(({ input, signal }: { input: EvaluationInput; signal: AbortSignal }) =>
        call<EvaluateOutput>(input.step.id, 'evaluateWork', signal, () => ({
          evaluation: evaluate(input.step.id, input.attempt),
          problem: null,
          ...report(),
        })),
      ),
    },
  });
  const queue = [...plans];
  const machine = runMachine.provide({
    actions: { record },
    actors: {
      runStep: steps,
      plan: fromPromise(({ signal }: { signal: AbortSignal }) =>
        call('run', 'plan', signal, () => ({ plan: queue.shift()!, ...report() })),
      ),
    },
  });
  const actor = createActor(machine, { input: runInput({ startedAt: Date.now(), ...overrides }) });
  const outcome = toPromise(actor);
  actor.start();
  return { outcome, actor, events, starts, aborted, work, peak: () => peak };
}

/** Step ids in the order their `type` events were recorded. */
const stepsOf = (events: RecordParams[], type: RecordParams['type']) =>
  events.filter((e) => e.type === type).map((e) => (e.payload as { stepId: string }).stepId);

/** Runs the fake clock until the run ends; resolves with its outcome and the virtual ms it took. */
async function finish(h: Harness): Promise<{ outcome: RunOutcome; ms: number }> {
  const from = Date.now();
  let outcome: RunOutcome | undefined;
  void h.outcome.then((o) => {
    outcome = o;
  });
  while (outcome === undefined) await vi.advanceTimersByTimeAsync(CALL_MS / 4);
  return { outcome, ms: Date.now() - from };
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('steps side by side', () => {
  it('runs independent steps at once: two chains of two steps take two steps of time', async () => {
    const h = harness({});
    const { outcome, ms } = await finish(h);
    expect(outcome.status).toBe('completed');
    expect(outcome.totals).toMatchObject({ passed: true, stepsPassed: 4 });
    // The planner, then each chain's 2 steps of 4 calls: 9 call-times, not 17.
    expect(ms).toBe(9 * CALL_MS);
    expect(h.peak()).toBe(2);
    // a and b start together; c and d once a and b have passed.
    expect(stepsOf(h.events, 'step.started')).toEqual(['a', 'b', 'c', 'd']);
    expect(h.starts.filter(([, , name]) => name === 'proposeContract')).toEqual([
      [CALL_MS, 'a', 'proposeContract'],
      [CALL_MS, 'b', 'proposeContract'],
      [5 * CALL_MS, 'c', 'proposeContract'],
      [5 * CALL_MS, 'd', 'proposeContract'],
    ]);
    // The outcomes, and the spend, of every step.
    expect(outcome.outcomes.map((o) => o.stepId)).toEqual(['a', 'b', 'c', 'd']);
    expect(outcome.totals.usage).toMatchObject({ calls: 17 });
  });

  it('keeps today’s order with maxParallelSteps 1: one step at a time, in plan order', async () => {
    const h = harness({ maxParallelSteps: 1 });
    const { outcome, ms } = await finish(h);
    expect(outcome.status).toBe('completed');
    expect(ms).toBe(17 * CALL_MS);
    expect(h.peak()).toBe(1);
    const order = h.events.map((e) => `${e.type}:${(e.payload as { stepId?: string }).stepId ?? ''}`);
    const firstOf = (id: string) => order.indexOf(`step.started:${id}`);
    const passedOf = (id: string) => order.indexOf(`step.passed:${id}`);
    for (const [before, after] of [
      ['a', 'b'],
      ['b', 'c'],
      ['c', 'd'],
    ] as const)
      expect(passedOf(before)).toBeLessThan(firstOf(after));
  });

  it('starts no more steps than there are slots', async () => {
    const plan = makePlan(['a', 'b', 'c', 'd']).steps.map((s) => ({ ...s, dependsOn: [] }));
    const h = harness({ maxParallelSteps: 3 }, undefined, [{ ...makePlan(['a']), steps: plan }]);
    const { outcome, ms } = await finish(h);
    expect(outcome.status).toBe('completed');
    expect(h.peak()).toBe(3);
    // Three steps at once, then the fourth: 1 + 4 + 4 call-times.
    expect(ms).toBe(9 * CALL_MS);
  });

  it("gives a step its own dependencies' artefacts only, once they have ended", async () => {
    const h = harness({});
    await finish(h);
    const workOf = (id: string) => h.work.find((w) => w.step.id === id)!;
    expect(workOf('c').dependencies.map((d) => d.stepId)).toEqual(['a']);
    expect(workOf('d').dependencies.map((d) => d.stepId)).toEqual(['b']);
    expect(workOf('a').dependencies).toEqual([]);
  });

  it('under abort, stops every step in flight when one is exhausted', async () => {
    // b fails every attempt; a is still working when b runs out.
    const h = harness({ onStepExhausted: 'abort', maxRetriesPerStep: 0 }, (id) =>
      id === 'b' ? scored(2, 2) : scored(8, 7),
    );
    const { outcome } = await finish(h);
    expect(outcome.status).toBe('aborted');
    expect(stepsOf(h.events, 'step.failed')).toEqual(['b']);
    expect(h.events.at(-1)).toMatchObject({ type: 'run.failed', payload: { reason: 'aborted' } });
    // a passed in the same tick as b was judged, so c had started: its call is stopped, and d,
    // which needs b, never starts.
    expect(h.aborted).toEqual(['c']);
    expect(stepsOf(h.events, 'step.started')).toEqual(['a', 'b', 'c']);
    // The closing event says where c stood: proposing its contract.
    expect(h.events.at(-1)?.payload).toMatchObject({
      inFlight: [{ stepId: 'c', stepNumber: 3, attempt: 1, state: 'negotiating.proposing' }],
    });
  });

  it('under replan, lets the steps in flight finish, then replans; passed steps stay passed', async () => {
    const h = harness({ onStepExhausted: 'replan', maxRetriesPerStep: 0, maxReplans: 1 }, (id, attempt) =>
      id === 'b' && attempt === 1 && h.starts.filter(([, s]) => s === 'run').length === 1
        ? scored(2, 2)
        : scored(8, 7),
    );
    const { outcome } = await finish(h);
    expect(outcome.status).toBe('completed');
    expect(h.aborted).toEqual([]);
    // a passed beside the failing b, and is not run again after the replan.
    const started = stepsOf(h.events, 'step.started');
    expect(started.filter((id) => id === 'a')).toHaveLength(1);
    expect(started.filter((id) => id === 'b')).toHaveLength(2);
    const planned = h.events.filter((e) => e.type === 'plan.created');
    expect(planned).toHaveLength(2);
    expect(planned[1]).toMatchObject({ payload: { replan: 1 } });
    // The replan came after a had ended: a's step.passed precedes the second plan.
    const types = h.events.map((e) => `${e.type}:${(e.payload as { stepId?: string }).stepId ?? ''}`);
    expect(types.indexOf('step.passed:a')).toBeLessThan(types.lastIndexOf('plan.created:'));
  });

  it('counts every step’s calls against the budget, and stops every step in flight when it is spent', async () => {
    // 5 calls' worth: the planner's and 4 more, wherever they come from.
    const maxCostUsd = CALL_USAGE.costUsd * 5;
    const h = harness({ budgets: { maxCostUsd, maxTokens: null, maxDurationMs: null } });
    const { outcome } = await finish(h);
    expect(outcome.status).toBe('stopped');
    expect(outcome.stoppedBy).toBe('maxCostUsd');
    // Alone, each of a and b would have made its 4 calls; together they stop at the budget, the
    // call that was in flight when it was spent counted too.
    const calls = h.starts.length;
    expect(calls).toBeLessThanOrEqual(6);
    expect(outcome.totals.usage.calls + h.aborted.length).toBe(calls);
    // The closing event lists every step whose call was stopped, each with the state it was in.
    const closing = h.events.at(-1) as Extract<RecordParams, { type: 'run.failed' }>;
    expect(closing.payload.reason).toBe('budget');
    expect(closing.payload.inFlight?.map((s) => s.stepId).sort()).toEqual([...h.aborted].sort());
    for (const step of closing.payload.inFlight ?? []) expect(step.state).not.toBe('');
  });

  it('cancels: stops every step in flight and records who asked, and why', async () => {
    const h = harness({});
    await vi.advanceTimersByTimeAsync(CALL_MS * 1.5);
    h.actor.send({ type: 'cancel', by: 'alice', reason: 'wrong task' });
    const outcome = await h.outcome;
    expect(outcome.status).toBe('cancelled');
    expect(h.aborted.sort()).toEqual(['a', 'b']);
    expect(h.events.at(-1)).toMatchObject({
      type: 'run.failed',
      payload: {
        reason: 'cancelled',
        message: 'the run was cancelled by alice: wrong task',
        cancelled: { by: 'alice', reason: 'wrong task' },
        inFlight: [{ stepId: 'a' }, { stepId: 'b' }],
      },
    });
    // Nothing is recorded after the close, and a later interrupt changes nothing.
    h.actor.send({ type: 'interrupt' });
    expect(h.events.filter((e) => e.type === 'run.failed')).toHaveLength(1);
  });

  it('stops every step in flight on an interrupt', async () => {
    const h = harness({});
    await vi.advanceTimersByTimeAsync(CALL_MS * 1.5);
    h.actor.send({ type: 'interrupt', reason: 'operator' });
    const outcome = await h.outcome;
    expect(outcome.status).toBe('interrupted');
    expect(h.aborted.sort()).toEqual(['a', 'b']);
    // The planner took the first call's time: both were proposing their contracts when Ctrl-C came.
    const proposing = { attempt: 1, state: 'negotiating.proposing' };
    expect(h.events.at(-1)).toMatchObject({
      type: 'run.failed',
      payload: {
        reason: 'interrupted',
        inFlight: [
          { stepId: 'a', stepNumber: 1, ...proposing },
          { stepId: 'b', stepNumber: 2, ...proposing },
        ],
      },
    });
  });
});
