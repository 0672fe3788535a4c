import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resolveOptions } from '../../src/api/options.js';
import { subscribeEvents, subscribeRejections } from '../../src/bus/channels.js';
import type { MessageRejection } from '../../src/bus/codec.js';
import { NatsBus } from '../../src/bus/nats-bus.js';
import { WORK_STREAM } from '../../src/bus/nats-streams.js';
import { RunLeases, readRunLeases } from '../../src/bus/run-leases.js';
import { subjects } from '../../src/bus/subjects.js';
import { createRoleWorker, type RoleWorker } from '../../src/roles/role-worker.js';
import { startCoordinatorService } from '../../src/runtime/coordinator-service.js';
import { natsRunOwnership } from '../../src/runtime/nats-ownership.js';
import type { RoleRequest, RunEvent } from '../../src/schemas/index.js';
import { ScriptedModel } from '../../src/testing.js';
import { type NatsServerHandle, startNatsServer } from '../support/nats-server.js';
import { passingScript } from '../support/scripts.js';

/**
 * Role workers on NATS refuse work no coordinator issued: a work item whose run has no lease in
 * `pge-runs` is acknowledged, reported on `pge.errors.rejected` and never reaches a model, while
 * the work of a run submitted to a coordinator is served as always.
 */

let nats: NatsServerHandle;
let bus: NatsBus;
let workerBus: NatsBus;
let outsider: NatsConnection;
beforeEach(async () => {
  nats = await startNatsServer();
  bus = await NatsBus.connect({ servers: nats.url });
  workerBus = await NatsBus.connect({ servers: nats.url });
  outsider = await connect({ servers: nats.url });
});
afterEach(async () => {
  await outsider.close();
  await workerBus.close();
  await bus.close();
  await nats.stop();
});

describe('work items of runs with no lease', () => {
  it('a run with no lease is not live, also before any coordinator made the bucket', async () => {
    const isLiveRun = await readRunLeases(workerBus.connection);
    expect(await isLiveRun('run-nobody-started')).toBe(false);
    const leases = await RunLeases.open(bus.connection, {
      owner: 'coordinator-1',
      onExpired: () => undefined,
      onLost: () => undefined,
    });
    try {
      expect(await isLiveRun('run-claimed')).toBe(false);
      expect(await leases.claim('run-claimed')).toBe(true);
      expect(await isLiveRun('run-claimed')).toBe(true);
      await leases.release('run-claimed');
      expect(await isLiveRun('run-claimed')).toBe(false);
    } finally {
      leases.stop();
    }
  });

  it('are refused without a model call, while a submitted run is served', async () => {
    const model = new ScriptedModel(passingScript(1));
    const isLiveRun = await readRunLeases(workerBus.connection);
    const workers: RoleWorker[] = (['planner', 'generator', 'evaluator'] as const).map((role) =>
      createRoleWorker({ bus: workerBus, role, model, workerId: role, isLiveRun }),
    );
    const leases = await RunLeases.open(bus.connection, {
      owner: 'coordinator-1',
      onExpired: () => undefined,
      onLost: () => undefined,
    });
    const coordinator = startCoordinatorService({
      bus,
      options: resolveOptions({ workingDirectory: '/tmp' }),
      models: { planner: model.name, generator: model.name, evaluator: model.name },
      ownership: natsRunOwnership(bus, leases),
    });
    const events: RunEvent[] = [];
    const rejections: MessageRejection[] = [];
    subscribeRejections(bus, (rejection) => void rejections.push(rejection));
    try {
      const closed = new Promise<void>((resolve) =>
        subscribeEvents(bus, '*', (event) => {
          events.push(event);
          if (event.type === 'run.completed' || event.type === 'run.failed') resolve();
        }),
      );
      await bus.flush();
      await bus.request(subjects.submit, { task: 'a real run' });
      await closed;
      expect(events.at(-1)?.type).toBe('run.completed');
      expect(model.requests).toHaveLength(5);

      // An outsider copies the run's plan request under a run id no coordinator holds, and puts
      // it straight on the planner's work queue, five times.
      const real = events.find((e): e is RoleRequest => e.type === 'plan.requested')!;
      const js = jetstream(outsider);
      for (let i = 1; i <= 5; i++) {
        const forged = { ...real, runId: 'run-no-lease', id: `run-no-lease-${i}` };
        await js.publish(subjects.work('planner'), JSON.stringify(forged));
      }
      const started = Date.now();
      while (rejections.length < 5 && Date.now() - started < 10_000)
        await new Promise((resolve) => setTimeout(resolve, 20));

      expect(model.requests).toHaveLength(5);
      expect(rejections).toHaveLength(5);
      expect(rejections.every((r) => /names run run-no-lease, which is not live/.test(r.problem))).toBe(true);
      // Acknowledged: nothing is left on the queue to be delivered again.
      const jsm = await jetstreamManager(outsider);
      let messages = (await jsm.streams.info(WORK_STREAM)).state.messages;
      for (let i = 0; i < 50 && messages > 0; i++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        messages = (await jsm.streams.info(WORK_STREAM)).state.messages;
      }
      expect(messages).toBe(0);
    } finally {
      await coordinator.stop('interrupt');
      await Promise.all(workers.map((w) => w.stop('abort')));
      leases.stop();
    }
  }, 30_000);
});
