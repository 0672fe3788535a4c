import { afterEach, describe, expect, it } from 'vitest';
import {
  enqueueWork,
  publishCancel,
  subscribeEvents,
  subscribeRejections,
  subscribeResults,
} from '../../src/bus/channels.js';
import type { MessageRejection } from '../../src/bus/codec.js';
import { InProcessBus } from '../../src/bus/in-process-bus.js';
import { createCoordinator } from '../../src/conductor/coordinator.js';
import type { Model } from '../../src/roles/model.js';
import { createRoleWorker, LIVE_RUN_CACHE_MS } from '../../src/roles/role-worker.js';
import type { RoleRequest, RoleResult, RunEvent } from '../../src/schemas/index.js';
import { ScriptedModel } from '../../src/testing.js';
import { freshRunId, planRequested } from '../bus/bus-contract.js';
import { runSpec } from '../support/chart-fixtures.js';
import { until } from '../support/deployment.js';
import { passingScript } from '../support/scripts.js';

/**
 * Role workers that are told which runs are live (`isLiveRun`; on NATS, the runs with a lease):
 * they serve a live run's work, asking about the run once while the answer is remembered, and
 * refuse a work item of any other run before calling their model.
 */

let cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const step of cleanup.reverse()) await step();
  cleanup = [];
});

/** Workers of every role on one in-process bus, live runs being those in `live`, and a coordinator. */
function deployment(live: Set<string>) {
  const bus = new InProcessBus();
  const model = new ScriptedModel(passingScript(1));
  const asked: string[] = [];
  let clock = 0;
  const isLiveRun = async (runId: string) => {
    asked.push(runId);
    return live.has(runId);
  };
  const workers = (['planner', 'generator', 'evaluator'] as const).map((role) =>
    createRoleWorker({ bus, role, model, workerId: role, isLiveRun, now: () => clock }),
  );
  const events: RunEvent[] = [];
  const results: RoleResult[] = [];
  const rejections: MessageRejection[] = [];
  subscribeEvents(bus, '*', (event) => void events.push(event));
  subscribeResults(bus, '*', (result) => void results.push(result));
  subscribeRejections(bus, (rejection) => void rejections.push(rejection));
  const coordinator = createCoordinator({ bus });
  cleanup.push(async () => {
    await Promise.all(workers.map((w) => w.stop('abort')));
    coordinator.close();
    await bus.close();
  });
  return {
    bus,
    model,
    asked,
    events,
    results,
    rejections,
    coordinator,
    advance: (ms: number) => {
      clock += ms;
    },
  };
}

describe('role workers and live runs', () => {
  it("serve a live run's work, each asking whether it is live once while the answer is remembered", async () => {
    const { model, asked, rejections, coordinator } = deployment(new Set(['run-live']));
    const outcome = await coordinator.startRun(runSpec('run-live')).done;
    expect(outcome.status).toBe('completed');
    // Plan, contract, review, work and evaluation: five requests, one question per worker.
    expect(model.requests).toHaveLength(5);
    expect(asked).toEqual(['run-live', 'run-live', 'run-live']);
    expect(rejections).toEqual([]);
  });

  it('refuse a work item of a run that is not live: no model call, no result, reported; asked again each time', async () => {
    const live = new Set(['run-live']);
    const { bus, model, asked, events, results, rejections, coordinator, advance } = deployment(live);
    await coordinator.startRun(runSpec('run-live')).done;
    const calls = model.requests.length;
    const real = events.find((e): e is RoleRequest => e.type === 'plan.requested')!;

    // A copy of a real work item under a run no coordinator issued, put on the queue twice.
    const forged = { ...real, runId: 'run-forged', id: 'run-forged-1' } as RoleRequest;
    await enqueueWork(bus, forged);
    await enqueueWork(bus, { ...forged, id: 'run-forged-2' });
    await until(
      () => rejections.length,
      (n) => n === 2,
      'the two forged items refused',
    );
    // The run that ended is not live any more either, once its remembered answer is old.
    live.delete('run-live');
    advance(LIVE_RUN_CACHE_MS + 1);
    await enqueueWork(bus, { ...real, id: 'run-live-again' });
    await until(
      () => rejections.length,
      (n) => n === 3,
      'the ended run’s item refused',
    );
    await bus.flush();

    expect(model.requests).toHaveLength(calls);
    expect(results.filter((r) => r.runId === 'run-forged' || r.requestId === 'run-live-again')).toEqual([]);
    expect(asked.slice(3)).toEqual(['run-forged', 'run-forged', 'run-live']);
    expect(rejections.map((r) => r.subject)).toEqual([
      'pge.work.planner',
      'pge.work.planner',
      'pge.work.planner',
    ]);
    expect(rejections[0]!.problem).toMatch(
      /^plan\.requested run-forged-1 names run run-forged, which is not live .*: refused by planner, no model was called$/,
    );
  });
});

describe('role workers and cancels', () => {
  it('abort every copy of a cancelled request they hold: a request sent again may reach one worker twice', async () => {
    const bus = new InProcessBus();
    let calls = 0;
    const aborted: unknown[] = [];
    // A model whose calls end only when aborted: each stays in flight until then.
    const model: Model = {
      name: 'test-model',
      complete: ({ signal }) => {
        calls++;
        return new Promise<never>((_resolve, reject) =>
          signal?.addEventListener('abort', () => {
            aborted.push(signal.reason);
            reject(signal.reason);
          }),
        );
      },
    };
    const worker = createRoleWorker({ bus, role: 'planner', model, workerId: 'planner-1', concurrency: 2 });
    const results: RoleResult[] = [];
    subscribeResults(bus, '*', (result) => void results.push(result));
    cleanup.push(async () => {
      await worker.stop('abort');
      await bus.close();
    });
    const runId = freshRunId();
    const request = planRequested(runId);
    // The request, and the copy a coordinator sends when it judges the first lost.
    await enqueueWork(bus, request);
    await enqueueWork(bus, request, undefined, undefined, `${request.id}-again-1`);
    await until(
      () => calls,
      (n) => n === 2,
      'both copies in flight',
      5_000,
    );
    expect(worker.holding()).toEqual([request.id]);

    await publishCancel(bus, {
      runId,
      requestId: request.id,
      reason: 'answered',
      ts: new Date().toISOString(),
    });
    await until(
      () => aborted.length,
      (n) => n === 2,
      'both copies aborted',
      5_000,
    );
    await bus.flush();
    expect(aborted.map((reason) => (reason as Error).name)).toEqual([
      'CallCancelledError',
      'CallCancelledError',
    ]);
    expect(worker.holding()).toEqual([]);
    expect(results).toEqual([]);
  });
});
