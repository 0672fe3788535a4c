import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { publishResult, serveWork, subscribeCancels, subscribeEvents } from '../../src/bus/channels.js';
import { InProcessBus } from '../../src/bus/in-process-bus.js';
import { createCoordinator } from '../../src/conductor/coordinator.js';
import type { LostWork } from '../../src/conductor/run-calls.js';
import type { CallCancel } from '../../src/schemas/control.js';
import type { RoleRequest, RunEvent } from '../../src/schemas/index.js';
import { runSpec } from '../support/chart-fixtures.js';
import { planOf } from '../support/scripts.js';

/**
 * How a call's looks judge its work item lost (`LostWork`), with what the transport and the
 * workers say given by hand: sent again only when the role's queue was idle at two looks in a row
 * and no worker said it held the item then, nor a moment later; the other copy dropped once
 * answered. tests/nats/lost-work.test.ts shows it on a real server.
 */

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const close of cleanup.splice(0).reverse()) await close();
});

const LOOK_MS = 20;

/** A run whose plan request is held by hand, on a coordinator told `idle` and `held` at each look. */
function run(runId: string, idle: () => boolean, held: () => boolean | null) {
  const bus = new InProcessBus();
  const events: RunEvent[] = [];
  const cancels: CallCancel[] = [];
  const delivered: RoleRequest[] = [];
  const sentAgain: string[] = [];
  subscribeEvents(bus, '*', (event) => void events.push(event));
  subscribeCancels(bus, (cancel) => void cancels.push(cancel));
  serveWork(bus, 'planner', async (request) => void delivered.push(request));
  const lostWork: LostWork = {
    idleAt: async () => (idle() ? Date.now() : null),
    heldSince: () => held(),
    confirmMs: LOOK_MS,
    onSentAgain: (_request, why) => sentAgain.push(why),
  };
  const coordinator = createCoordinator({
    bus,
    storedResult: async () => null,
    resultCheckMs: LOOK_MS,
    lostWork,
  });
  const handle = coordinator.startRun(runSpec(runId));
  cleanup.push(async () => {
    handle.interrupt('test over');
    await handle.done.catch(() => undefined);
    coordinator.close();
    await bus.close();
  });
  return { bus, events, cancels, delivered, sentAgain, handle };
}

describe('a work item judged lost at a call’s looks', () => {
  it('is sent again when its queue is idle and no worker holds it, and the other copy is dropped once answered', async () => {
    const runId = 'run-lost-plan';
    const { bus, events, cancels, delivered, sentAgain } = run(
      runId,
      () => true,
      () => false,
    );
    while (delivered.length < 2) await sleep(5);
    const [first, again] = delivered;
    expect(again?.id).toBe(first?.id);
    expect(sentAgain[0]).toContain(`run ${runId}: plan.requested ${first?.id} was handed out`);
    await publishResult(bus, {
      requestId: first!.id,
      runId,
      role: 'planner',
      worker: 'hand',
      calls: [],
      result: { status: 'ok', phase: 'plan', output: { plan: planOf(1), truncation: null } },
    });
    await bus.flush();
    // The copy still running is told to stop; the call was answered, not cancelled.
    expect(cancels.filter((c) => c.requestId === first!.id).map((c) => c.reason)).toEqual([
      `answered by another copy of ${first!.id}`,
    ]);
    expect(events.some((e) => e.type === 'request.cancelled' && e.payload.requestId === first!.id)).toBe(
      false,
    );
    // The plan is taken: the run goes on.
    while (!events.some((e) => e.type === 'plan.created')) await sleep(5);
    // Answered: not sent again.
    const copies = delivered.filter((r) => r.id === first!.id).length;
    await sleep(LOOK_MS * 8);
    expect(delivered.filter((r) => r.id === first!.id)).toHaveLength(copies);
  });

  const notLost: [string, () => boolean, () => boolean | null][] = [
    ['its queue is never idle (a backlog, or every worker busy)', () => false, () => false],
    ['a worker says it holds it', () => true, () => true],
    ['a worker of the role does not say what it holds', () => true, () => null],
  ];
  it.each(notLost)('is not sent again when %s', async (_, idle, held) => {
    const { delivered, sentAgain } = run('run-not-lost', idle, held);
    while (delivered.length < 1) await sleep(5);
    await sleep(LOOK_MS * 12);
    expect(delivered).toHaveLength(1);
    expect(sentAgain).toEqual([]);
  });

  it('is not sent again when a worker says it holds it a moment after the look', async () => {
    let asked = 0;
    // Not held at the look that finds the queue idle twice; held when asked again `confirmMs` later.
    const { delivered, sentAgain } = run(
      'run-taken-late',
      () => true,
      () => asked++ % 2 === 1,
    );
    while (delivered.length < 1) await sleep(5);
    await sleep(LOOK_MS * 12);
    expect(asked).toBeGreaterThan(1);
    expect(delivered).toHaveLength(1);
    expect(sentAgain).toEqual([]);
  });
});
