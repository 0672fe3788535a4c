import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isRoleRequest, type RunEvent, type RunEventOf } from '../../src/schemas/index.js';
import {
  closedRun,
  loggedRun,
  schemaOf,
  startDeployment,
  submitRun,
  type TestDeployment,
  until,
} from '../support/deployment.js';
import type { PgeProcess } from '../support/processes.js';
import { answers, planOf, scriptedStep } from '../support/scripted-deployment.js';
import { storedEvents } from '../support/stored-events.js';

/**
 * Steps side by side on a real deployment: the two independent steps of a plan have their work
 * done at the same time by two generator workers, and a coordinator SIGKILLed while both are
 * in flight has its run taken over with both steps rebuilt, each asked again, and finished.
 */

/** s1 and s2 depend on nothing, s3 on both: s1 and s2 run side by side, s3 after them. */
function sideBySidePlan() {
  const plan = planOf(3);
  plan.steps[1]!.dependsOn = [];
  plan.steps[2]!.dependsOn = ['s1', 's2'];
  return plan;
}

let deployment: TestDeployment;
beforeEach(async () => {
  deployment = await startDeployment();
});
afterEach(async () => {
  const { refusals } = await deployment.close();
  // Every process did its job within its credential.
  expect(refusals).toEqual([]);
});

const workCalls = () => deployment.openai.completions().filter((r) => schemaOf(r.body) === 'pge_work');

/**
 * Scripts the model server: the side-by-side plan, and every other answer passing; a work call
 * takes `workMs(n)` (n: how many work calls the server has had, this one included), others 20 ms.
 */
function scriptModels(workMs: (n: number) => number): void {
  const content: Record<string, object> = { ...answers(), pge_plan: sideBySidePlan() };
  deployment.openai.script((body) => {
    const schema = schemaOf(body) ?? '';
    return scriptedStep(content[schema], schema === 'pge_work' ? workMs(workCalls().length) : 20);
  });
}

const stepOf = (event: RunEvent): string | undefined =>
  (event.payload as { input?: { step?: { id: string } } }).input?.step?.id;

/** The (first) work request of step `stepId`. */
const workRequest = (events: readonly RunEvent[], stepId: string) =>
  events.find((e) => e.type === 'step.work.requested' && stepOf(e) === stepId)!;

/** The model call that answered request `requestId`. */
const callOf = (events: readonly RunEvent[], requestId: string) =>
  events.find(
    (e): e is RunEventOf<'model.call.completed'> =>
      e.type === 'model.call.completed' && e.payload.requestId === requestId,
  )!;

/** When a model call ran, as the coordinator saw it: from its answer's arrival back by its latency. */
function callSpan(call: RunEventOf<'model.call.completed'>): { start: number; end: number } {
  const end = Date.parse(call.ts);
  return { start: end - call.payload.latencyMs, end };
}

/** The steps that passed, in the order they did. */
const passedSteps = (events: readonly RunEvent[]) =>
  events.flatMap((e) => (e.type === 'step.passed' ? [e.payload.stepId] : []));

/**
 * The ids of the requests among `events` that nothing among them answers: no model call, failure
 * or cancellation names them. (These runs use no tools, so a request's one model call comes with
 * its answer.)
 */
function unanswered(events: readonly RunEvent[]): string[] {
  const named = new Set(
    events.flatMap((e) =>
      e.type === 'model.call.completed' || e.type === 'role.failed' || e.type === 'request.cancelled'
        ? [e.payload.requestId]
        : [],
    ),
  );
  return events.filter((e) => isRoleRequest(e) && !named.has(e.id)).map((e) => e.id);
}

describe('steps side by side on NATS', () => {
  it('has two generator workers do the work of two independent steps at the same time', async () => {
    // Slow enough that two calls one after the other cannot be taken for two at once.
    scriptModels(() => 1_500);
    await deployment.worker('coordinator');
    await deployment.worker('persistence', ['--working-dir', deployment.logs]);
    await deployment.worker('planner');
    await deployment.worker('evaluator');
    // Each takes one request at a time: two calls at once are one on each.
    await deployment.worker('generator', ['--concurrency', '1', '--worker-id', 'gen-a']);
    await deployment.worker('generator', ['--concurrency', '1', '--worker-id', 'gen-b']);

    const runId = await submitRun(deployment.client, 'two steps at once');
    const events = await closedRun(deployment.client, runId, 60_000);
    expect(events.at(-1)?.type).toBe('run.completed');
    expect(passedSteps(events).sort()).toEqual(['s1', 's2', 's3']);

    const [one, two] = ['s1', 's2'].map((s) => callOf(events, workRequest(events, s).id));
    const [a, b] = [callSpan(one!), callSpan(two!)];
    const overlapMs = Math.min(a.end, b.end) - Math.max(a.start, b.start);
    // Side by side the calls share nearly all their 1.5 s; one after the other, none of it.
    expect(overlapMs, JSON.stringify({ a, b })).toBeGreaterThan(750);
    // Two calls at once, each on a worker that takes one at a time.
    expect(new Set([one!.payload.worker, two!.payload.worker])).toEqual(new Set(['gen-a', 'gen-b']));

    // s3 waited for both of the steps it depends on.
    const seqOf = (type: string, stepId: string) =>
      events.find((e) => e.type === type && (e.payload as { stepId?: string }).stepId === stepId)!.seq;
    expect(seqOf('step.started', 's3')).toBeGreaterThan(seqOf('step.passed', 's1'));
    expect(seqOf('step.started', 's3')).toBeGreaterThan(seqOf('step.passed', 's2'));
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
  }, 90_000);

  it('a coordinator killed while two steps work has its run taken over with both steps rebuilt', async () => {
    // The first two work calls, s1's and s2's, take 3 s: the owner dies while both run.
    scriptModels((n) => (n <= 2 ? 3_000 : 20));
    const coordinators: Record<string, PgeProcess> = {
      'coord-a': await deployment.worker('coordinator', ['--worker-id', 'coord-a']),
      'coord-b': await deployment.worker('coordinator', ['--worker-id', 'coord-b']),
    };
    await deployment.worker('persistence', ['--working-dir', deployment.logs]);
    for (const role of ['planner', 'generator', 'evaluator'] as const) await deployment.worker(role);

    const client = deployment.client;
    const runId = await submitRun(client, 'survive with two steps running');
    await until(
      () => workCalls().length,
      (n) => n === 2,
      'both work calls in flight',
    );
    const owner = Object.keys(coordinators).find((id) => coordinators[id]!.stderr().includes(runId))!;
    const heir = owner === 'coord-a' ? 'coord-b' : 'coord-a';
    const before = await storedEvents(client, `pge.run.${runId}.evt.>`);
    await coordinators[owner]!.stop('SIGKILL');

    const events = await closedRun(client, runId, 60_000);
    expect(events.at(-1)?.type).toBe('run.completed');
    expect(passedSteps(events).sort()).toEqual(['s1', 's2', 's3']);
    // Gap-free and in order, the dead owner's events kept as they were.
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(events.slice(0, before.length)).toEqual(before);

    const resumed = events.filter((e): e is RunEventOf<'run.resumed'> => e.type === 'run.resumed');
    expect(resumed).toHaveLength(1);
    const resume = resumed[0]!.payload;
    expect(resume.owner).toBe(heir);
    expect(coordinators[heir]!.stderr()).toContain(`took over run ${runId} from ${owner}`);
    // What the dead owner recorded left both steps' work requests, and nothing else, unanswered:
    // those, and only those, are asked again.
    const inFlight = unanswered(events.slice(0, resume.fromSeq)).sort();
    expect(inFlight).toEqual(['s1', 's2'].map((s) => workRequest(events, s).id).sort());
    expect([...resume.repeated].sort()).toEqual(inFlight);
    // Each model call whose result an owner took is recorded once; a call asked again may answer
    // twice (the second result rejected as late), so the server saw at most one more per repeat.
    const calls = events.filter((e) => e.type === 'model.call.completed').length;
    const served = deployment.openai.completions().length;
    expect(calls).toBeLessThanOrEqual(served);
    expect(served).toBeLessThanOrEqual(calls + resume.repeated.length);

    // The log, written by the persistence worker, is the stream.
    expect(await loggedRun(deployment.logs, runId, events.length)).toEqual(events);
  }, 90_000);
});
