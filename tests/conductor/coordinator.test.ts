import { afterEach, describe, expect, it } from 'vitest';
import type { InspectionEvent } from 'xstate';
import type { Bus } from '../../src/bus/bus.js';
import {
  publishResult,
  serveWork,
  subscribeCancels,
  subscribeEvents,
  subscribeRejections,
  subscribeResults,
} from '../../src/bus/channels.js';
import type { MessageRejection } from '../../src/bus/codec.js';
import { InProcessBus } from '../../src/bus/in-process-bus.js';
import { createCoordinator } from '../../src/conductor/coordinator.js';
import { EventSeqTakenError, RunTakenOverError } from '../../src/errors.js';
import { createRoleWorker, type RoleWorker } from '../../src/roles/role-worker.js';
import type { CallCancel } from '../../src/schemas/control.js';
import type { ModelCall, RoleRequest, RoleResult, RunEvent } from '../../src/schemas/index.js';
import { ID_PATTERN, ROLE_OF_REQUEST } from '../../src/schemas/index.js';
import { ScriptedModel } from '../../src/testing.js';
import { runSpec } from '../support/chart-fixtures.js';
import { withPublish } from '../support/delegating-bus.js';
import { passingScript, planOf } from '../support/scripts.js';

/**
 * The coordinator: on a bus whose publishes resolve or reject on their own (a rejected publish
 * stops the run), and facing results that no call waits for (never applied, always reported).
 */

/** A bus that publishes through `inner` and answers publish `n` with `answer(n, published, subject)`. */
function wrapped(
  inner: InProcessBus,
  answer: (n: number, published: Promise<void>, subject: string) => Promise<void>,
): Bus {
  let n = 0;
  return withPublish(inner, (subject, data) => answer(++n, inner.publish(subject, data), subject));
}

let cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const step of cleanup.reverse()) await step();
  cleanup = [];
});

/** Runs a 2-step passing script on `makeBus(inner)`; returns the outcome (or error) and the events. */
async function run(makeBus: (inner: InProcessBus) => Bus, runId = `run-${cleanup.length + 1}`) {
  const inner = new InProcessBus();
  const bus = makeBus(inner);
  const events: RunEvent[] = [];
  subscribeEvents(inner, '*', (event) => void events.push(event));
  const model = new ScriptedModel(passingScript(2));
  const workers: RoleWorker[] = (['planner', 'generator', 'evaluator'] as const).map((role) =>
    createRoleWorker({ bus, role, model, workerId: role }),
  );
  const coordinator = createCoordinator({ bus });
  cleanup.push(async () => {
    await Promise.all(workers.map((w) => w.stop('abort')));
    coordinator.close();
    await inner.close();
  });
  const handle = coordinator.startRun(runSpec(runId));
  const settled = await handle.done.then(
    (outcome) => ({ outcome, error: null }),
    (error: unknown) => ({ outcome: null, error }),
  );
  await inner.flush();
  return { ...settled, events };
}

describe('coordinator on a bus with promises of its own', () => {
  it('runs the same events when each publish resolves with a promise of its own', async () => {
    const plain = await run((inner) => inner);
    const other = await run((inner) => wrapped(inner, (_, published) => published.then(() => undefined)));
    expect(plain.outcome?.status).toBe('completed');
    expect(other.outcome?.status).toBe('completed');
    expect(other.events.map((e) => e.type)).toEqual(plain.events.map((e) => e.type));
  });

  it('stops a run whose event could not be published, and rejects with that error', async () => {
    const boom = new Error('the transport refused it');
    const { outcome, error, events } = await run((inner) =>
      wrapped(inner, (n, published) => (n === 5 ? Promise.reject(boom) : published)),
    );
    expect(outcome).toBeNull();
    expect(error).toBe(boom);
    expect(events.at(-1)?.type).toBe('run.failed');
    const failed = events.at(-1) as Extract<RunEvent, { type: 'run.failed' }>;
    expect(JSON.stringify(failed.payload)).toContain('could not be published');
  });

  it('lets a run go, neither failed nor ended, when another coordinator recorded an event of a seq it records', async () => {
    const taken = new EventSeqTakenError('its event 5 is stored already, as another coordinator recorded it');
    const { outcome, error, events } = await run((inner) =>
      wrapped(inner, (n, published) => (n === 5 ? published.then(() => Promise.reject(taken)) : published)),
    );
    expect(outcome).toBeNull();
    expect(error).toBeInstanceOf(RunTakenOverError);
    expect((error as Error).message).toBe(taken.message);
    // The run is the other coordinator's to go on with: this one records no end of it.
    expect(events.some((e) => e.type === 'run.failed' || e.type === 'run.completed')).toBe(false);
  });

  it('aborts the signal its events and work items are sent with once it lets the run go', async () => {
    const signals: (AbortSignal | undefined)[] = [];
    const taken = new EventSeqTakenError('its event 5 is stored already, as another coordinator recorded it');
    const { error } = await run((inner) =>
      withPublish(inner, (subject, data, options) => {
        // The workers' results go through this bus too.
        if (subject.includes('.result.')) return inner.publish(subject, data, options);
        signals.push(options?.signal);
        return signals.length === 5
          ? inner.publish(subject, data, options).then(() => Promise.reject(taken))
          : inner.publish(subject, data, options);
      }),
    );
    expect(error).toBeInstanceOf(RunTakenOverError);
    // One signal for the run, aborted with the reason the run was let go.
    expect(new Set(signals).size).toBe(1);
    expect(signals[0]?.aborted).toBe(true);
    expect(signals[0]?.reason).toBe(error);
  });

  it('lets a run go even after its closing event, when another coordinator recorded that seq', async () => {
    const taken = new EventSeqTakenError(
      'its closing event is stored already, as another coordinator recorded it',
    );
    const { outcome, error } = await run((inner) =>
      wrapped(inner, (_, published, subject) =>
        subject.endsWith('.evt.run.completed') ? published.then(() => Promise.reject(taken)) : published,
      ),
    );
    expect(outcome).toBeNull();
    expect(error).toBeInstanceOf(RunTakenOverError);
  });

  it('stops a run whose request was published as an event but could not be queued as work', async () => {
    // The event goes out; the work item's promise rejects.
    const refused = new Error('the work queue refused it');
    let queued = 0;
    const { error, events } = await run((inner) =>
      wrapped(inner, (_, published, subject) =>
        subject.startsWith('pge.work.') && ++queued === 2 ? Promise.reject(refused) : published,
      ),
    );
    expect(error).toBe(refused);
    expect(events.at(-1)?.type).toBe('run.failed');
  });

  it('gives every event an id that no one can predict: not <runId>-<seq>, and not the same in a second identical run', async () => {
    const first = await run((inner) => inner, 'run-twice');
    const second = await run((inner) => inner, 'run-twice');
    expect(first.outcome?.status).toBe('completed');
    expect(second.events.map((e) => e.type)).toEqual(first.events.map((e) => e.type));
    for (const { events } of [first, second]) {
      for (const event of events) {
        expect(event.id).toMatch(ID_PATTERN);
        expect(event.id).toMatch(new RegExp(`^run-twice-${event.seq}-[0-9a-f]{16}$`));
      }
    }
    const ids = new Set(first.events.map((e) => e.id));
    expect(second.events.filter((e) => ids.has(e.id))).toEqual([]);
    // The random parts differ within a run too: no id tells the next one.
    const tails = first.events.map((e) => e.id.slice(e.id.lastIndexOf('-') + 1));
    expect(new Set(tails).size).toBe(tails.length);
  });
});

describe('the session chart of each run', () => {
  it('is the actor the inspector sees, with the run and step charts as its descendants', async () => {
    const inner = new InProcessBus();
    const model = new ScriptedModel(passingScript(1));
    const workers = (['planner', 'generator', 'evaluator'] as const).map((role) =>
      createRoleWorker({ bus: inner, role, model, workerId: role }),
    );
    const seen: InspectionEvent[] = [];
    const coordinator = createCoordinator({ bus: inner, inspect: (e) => void seen.push(e) });
    cleanup.push(async () => {
      await Promise.all(workers.map((w) => w.stop('abort')));
      coordinator.close();
      await inner.close();
    });
    const outcome = await coordinator.startRun(runSpec('run-inspected')).done;
    expect(outcome.status).toBe('completed');
    const actors = seen.filter((e) => e.type === '@xstate.actor');
    const idOf = (e: InspectionEvent) => (e.actorRef as { logic?: { id?: string } }).logic?.id;
    const session = actors.find((e) => idOf(e) === 'session')!;
    expect(session.actorRef.sessionId).toBe(session.rootId);
    // One actor system: the run and the step charts (and every call) are the session's descendants.
    expect(new Set(actors.map((e) => e.rootId))).toEqual(new Set([session.rootId]));
    const parentOf = (e: InspectionEvent) =>
      (e.actorRef as { _parent?: { sessionId: string } })._parent?.sessionId;
    const run = actors.find((e) => idOf(e) === 'run')!;
    expect(parentOf(run)).toBe(session.actorRef.sessionId);
    expect(parentOf(actors.find((e) => idOf(e) === 'step')!)).toBe(run.actorRef.sessionId);
    const values = seen
      .filter((e) => e.type === '@xstate.snapshot' && e.actorRef === session.actorRef)
      .map((e) => JSON.stringify((e as unknown as { snapshot: { value: unknown } }).snapshot.value));
    expect(values[0]).toBe(JSON.stringify({ open: { live: 'working' } }));
    expect(values.at(-1)).toBe(JSON.stringify('closed'));
    // A call's deadline is the calling state's: the session takes no event for it.
    expect(values).toHaveLength(2);
  });
});

/**
 * A coordinator whose planner and generator are the test's own hands: it sees each request and
 * answers it when and as often as it likes.
 */
function byHand(runId: string) {
  const bus = new InProcessBus();
  const events: RunEvent[] = [];
  const rejections: MessageRejection[] = [];
  const cancels: CallCancel[] = [];
  subscribeEvents(bus, '*', (event) => void events.push(event));
  subscribeRejections(bus, (r) => void rejections.push(r));
  subscribeCancels(bus, (c) => void cancels.push(c));
  const held: RoleRequest[] = [];
  for (const role of ['planner', 'generator'] as const) serveWork(bus, role, async (r) => void held.push(r));
  const coordinator = createCoordinator({ bus });
  cleanup.push(async () => {
    coordinator.close();
    await bus.close();
  });
  const handle = coordinator.startRun(runSpec(runId));
  /** Answers `request` as the role that serves it would, unless `forged` says otherwise. */
  const answer = (
    request: RoleRequest,
    result: RoleResult['result'],
    worker = 'hand',
    calls: ModelCall[] = [],
    forged: Partial<Pick<RoleResult, 'runId' | 'role'>> = {},
  ) =>
    publishResult(bus, {
      requestId: request.id,
      runId,
      role: ROLE_OF_REQUEST[request.type],
      worker,
      calls,
      result,
      ...forged,
    });
  const until = async (check: () => boolean) => {
    while (!check()) await new Promise((resolve) => setTimeout(resolve, 1));
  };
  return { bus, events, rejections, cancels, held, handle, answer, until };
}

const CONTRACT: RoleResult['result'] = {
  status: 'ok',
  phase: 'contract',
  output: { title: 't', acceptanceCriteria: ['a'], expectedOutput: 'o', verificationMethod: 'v' },
};

describe('a run let go (abandon: its lease was taken)', () => {
  it('stops recording and sending: no cancel of the call in flight, no closing event, a later result not judged', async () => {
    const runId = 'run-abandoned';
    const { bus, events, cancels, rejections, held, handle, answer, until } = byHand(runId);
    await until(() => held.length === 1);
    const before = events.length;
    handle.abandon('coordinator-2');
    await expect(handle.done).rejects.toThrow(
      new RunTakenOverError(`run ${runId} was taken over by coordinator-2`),
    );
    expect(handle.waitingAt()).toEqual([]);
    // Its new owner waits for the result: the call is not cancelled, and this coordinator judges no result of it.
    await answer(held[0]!, { status: 'ok', phase: 'plan', output: { plan: planOf(1), truncation: null } });
    await bus.flush();
    expect(events.length).toBe(before);
    expect(cancels).toEqual([]);
    expect(rejections).toEqual([]);
  });
});

describe('results that no call waits for', () => {
  it('applies the first answer only; a duplicate, a late and an unknown one are reported, never applied', async () => {
    const runId = 'run-answers';
    const { bus, events, rejections, cancels, held, handle, answer, until } = byHand(runId);

    await until(() => held.length === 1);
    const planRequest = held[0]!;
    await answer(planRequest, { status: 'ok', phase: 'plan', output: { plan: planOf(1), truncation: null } });
    // The same answer again, as a redelivered request would bring it; then an answer to a request never made.
    await answer(
      planRequest,
      { status: 'ok', phase: 'plan', output: { plan: planOf(3), truncation: null } },
      'twin',
    );
    await answer(
      { ...planRequest, id: `${runId}-999` },
      { status: 'ok', phase: 'plan', output: { plan: planOf(2), truncation: null } },
    );
    await until(() => held.length === 2);
    const contractRequest = held[1]!;
    expect(contractRequest.type).toBe('step.contract.requested');

    // Interrupt while the contract is asked: the call is cancelled, then its answer arrives late.
    handle.interrupt('operator');
    const outcome = await handle.done;
    await answer(contractRequest, CONTRACT);
    await bus.flush();

    expect(outcome.status).toBe('interrupted');
    // The first plan counted: one step, not three or two.
    expect(outcome.plan?.steps).toHaveLength(1);
    const rejected = events.filter((e) => e.type === 'result.rejected').map((e) => e.payload);
    expect(rejected).toEqual([
      { requestId: planRequest.id, worker: 'twin', reason: 'duplicate' },
      { requestId: `${runId}-999`, worker: 'hand', reason: 'unknown' },
    ]);
    const types = events.map((e) => e.type);
    expect(types.slice(-2)).toEqual(['request.cancelled', 'run.failed']);
    expect(events.at(-2)?.payload).toMatchObject({ requestId: contractRequest.id, phase: 'contract' });
    expect(cancels).toEqual([expect.objectContaining({ runId, requestId: contractRequest.id })]);
    // Every one of the three is reported on pge.errors.rejected too; the late one only there.
    expect(rejections.map((r) => r.problem.split(' ')[0])).toEqual(['duplicate', 'unknown', 'late']);
    expect(rejections[2]!.problem).toContain(contractRequest.id);
    // Nothing was recorded after the closing event.
    expect(types.at(-1)).toBe('run.failed');
  });

  it('reports an answer to a waiting call from the wrong role or naming another run, never applies it, and still takes the real one', async () => {
    const runId = 'run-forged';
    const { bus, events, rejections, held, handle, answer, until } = byHand(runId);
    await until(() => held.length === 1);
    const planRequest = held[0]!;
    const forged = (plan: number) =>
      ({ status: 'ok', phase: 'plan', output: { plan: planOf(plan), truncation: null } }) as const;
    // A generator answering the planner's request, and an answer that names another run.
    await answer(planRequest, forged(3), 'rogue-generator', [], { role: 'generator' });
    await answer(planRequest, forged(2), 'rogue-planner', [], { runId: 'someone-elses-run' });
    await bus.flush();
    // The call still waits: the real answer is applied.
    await answer(planRequest, forged(1));
    await until(() => held.length === 2);
    handle.interrupt('operator');
    const outcome = await handle.done;
    await bus.flush();

    expect(outcome.plan?.steps).toHaveLength(1);
    const rejected = events.filter((e) => e.type === 'result.rejected').map((e) => e.payload);
    expect(rejected).toEqual([
      { requestId: planRequest.id, worker: 'rogue-generator', reason: 'wrong-role' },
      { requestId: planRequest.id, worker: 'rogue-planner', reason: 'wrong-run' },
    ]);
    expect(rejections.map((r) => r.problem)).toEqual([
      expect.stringMatching(/^wrong-role .* from a generator, the request is served by the planner$/),
      expect.stringMatching(/^wrong-run .* names run someone-elses-run, the request is run run-forged's$/),
    ]);
    // Neither forgery's cost nor answer counted.
    expect(events.filter((e) => e.type === 'plan.created')).toHaveLength(1);
  });

  it('counts an answer that came just before an interrupt: recorded with its cost, not as cancelled', async () => {
    const runId = 'run-answered-then-interrupted';
    const { bus, events, cancels, held, handle, answer, until } = byHand(runId);
    await until(() => held.length === 1);
    await answer(held[0]!, { status: 'ok', phase: 'plan', output: { plan: planOf(1), truncation: null } });
    await until(() => held.length === 2);
    const contractRequest = held[1]!;
    // The interrupt comes in the same delivery as the contract's answer, right after the coordinator took it.
    subscribeResults(bus, runId, () => handle.interrupt('operator'));
    const call: ModelCall = {
      role: 'generator',
      phase: 'contract',
      model: 'm',
      promptTokens: 10,
      completionTokens: 5,
      costUsd: 0.01,
      latencyMs: 3,
      repair: 0,
      outcome: 'valid',
      problem: null,
    };
    await answer(contractRequest, CONTRACT, 'hand', [call]);
    const outcome = await handle.done;
    await bus.flush();
    expect(outcome.status).toBe('interrupted');
    expect(events.filter((e) => e.type === 'request.cancelled')).toEqual([]);
    expect(cancels).toEqual([]);
    const completed = events.filter((e) => e.type === 'model.call.completed');
    expect(completed.map((e) => e.payload.requestId)).toEqual([contractRequest.id]);
    const closing = events.at(-1)!;
    expect(closing.type).toBe('run.failed');
    const byPhase = closing.type === 'run.failed' ? closing.payload.byPhase : [];
    expect(byPhase.find((p) => p.phase === 'contract')?.calls).toBe(1);
    expect(handle.calls).toHaveLength(1);
  });
});
