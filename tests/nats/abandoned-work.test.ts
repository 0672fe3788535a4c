import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resolveOptions } from '../../src/api/options.js';
import { answerAbandonedWork } from '../../src/bus/abandoned-work.js';
import { subscribeEvents } from '../../src/bus/channels.js';
import { NatsBus } from '../../src/bus/nats-bus.js';
import { ensurePullConsumer, WORK_MAX_ACK_PENDING, WORK_STREAM } from '../../src/bus/nats-streams.js';
import { subjects, workerQueue } from '../../src/bus/subjects.js';
import { DemoModel } from '../../src/roles/demo-model.js';
import { createRoleWorker } from '../../src/roles/role-worker.js';
import { startCoordinatorService } from '../../src/runtime/coordinator-service.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { type SecuredNatsServer, startSecuredNatsServer } from '../support/nats-server.js';

/**
 * A request that every worker dies holding: JetStream stops delivering it after the consumer's
 * `max_deliver`, and the coordinator's side answers it as failed at once (`WorkAbandonedError`),
 * so the run ends instead of waiting for its call deadline. On a server started from
 * `pge nats-config`, each part connects with the credential of the role it plays.
 */

let nats: SecuredNatsServer;
/** The coordinator's bus: it creates the streams, so it connects first. */
let coordinatorBus: NatsBus;
let plannerBus: NatsBus;
/** The test as the client that submits the run and reads its events. */
let clientBus: NatsBus;
/** Generators that die holding their work. */
let dying: NatsConnection;
beforeEach(async () => {
  nats = await startSecuredNatsServer();
  coordinatorBus = await NatsBus.connect({ servers: nats.url, credsFile: nats.creds.coordinator });
  plannerBus = await NatsBus.connect({ servers: nats.url, credsFile: nats.creds.planner });
  clientBus = await NatsBus.connect({ servers: nats.url, credsFile: nats.creds.client });
  dying = await connect(nats.connectOptions('generator'));
});
afterEach(async () => {
  await dying.close();
  for (const bus of [clientBus, plannerBus, coordinatorBus]) await bus.close();
  await nats.stop();
  // Every part did its job within its credential.
  expect(nats.refusals()).toEqual([]);
});

describe('abandoned work', () => {
  it('is answered with a failed result after max_deliver deliveries, and removed from the queue', async () => {
    const model = new DemoModel();
    const planner = createRoleWorker({ bus: plannerBus, role: 'planner', model });
    // Generators that take the request and die before answering: they never ack, and the server
    // delivers the item again after each ack wait, twice in all. (The generators' consumer, which
    // the coordinator made, is given these timings by the test's admin credential.)
    const setup = await connect(nats.connectOptions('admin'));
    await ensurePullConsumer(await jetstreamManager(setup), {
      stream: WORK_STREAM,
      durable: workerQueue('generator'),
      filter: subjects.work('generator'),
      ackWaitMs: 300,
      maxDeliver: 2,
      maxAckPending: WORK_MAX_ACK_PENDING,
    });
    await setup.close();
    const consumer = await jetstream(dying).consumers.get(WORK_STREAM, workerQueue('generator'));
    let deliveries = 0;
    const taking = (async () => {
      for await (const _msg of await consumer.consume({ max_messages: 1, expires: 1000 })) deliveries++;
    })();
    const reports: unknown[] = [];
    const abandoned = answerAbandonedWork(coordinatorBus, (error) => reports.push(error));
    const coordinator = startCoordinatorService({
      bus: coordinatorBus,
      // One step at a time: the demo's first two steps are independent, and this test follows one
      // poisoned request (side by side, each step's contract request would be poisoned alike).
      options: resolveOptions({ workingDirectory: '/tmp', maxParallelSteps: 1 }),
      models: { planner: model.name, generator: model.name, evaluator: model.name },
    });
    try {
      const events: RunEvent[] = [];
      const closed = new Promise<void>((resolve) =>
        subscribeEvents(clientBus, '*', (event) => {
          events.push(event);
          if (event.type === 'run.completed' || event.type === 'run.failed') resolve();
        }),
      );
      // The coordinator's subscriptions reach the server on its own connection: as a worker's
      // "ready" means, the server knows them before the client submits.
      await coordinatorBus.flush();
      await clientBus.request(subjects.submit, { task: 'a poison request' });
      await closed;

      expect(deliveries).toBe(2);
      const contract = events.find((e) => e.type === 'step.contract.requested')!;
      const failed = events.find((e) => e.type === 'role.failed');
      expect(failed?.payload).toMatchObject({
        requestId: contract.id,
        error: { name: 'WorkAbandonedError', message: expect.stringMatching(/delivered 2 times/) },
      });
      expect(events.at(-1)).toMatchObject({ type: 'run.failed', payload: { reason: 'error' } });
      const calls = events.filter((e) => e.type === 'model.call.completed');
      expect(calls.map((e) => e.payload.role)).toEqual(['planner']);
      // Nothing is left in the work queue for a generator that starts later.
      // The failed result is published first (so a crash in between leaves the item, not the run,
      // waiting); the item is removed right after, so the run may close a moment before it is gone.
      // (The test's inspection, with its admin credential.)
      const admin = await connect(nats.connectOptions('admin'));
      try {
        const inspect = await jetstreamManager(admin);
        let messages = (await inspect.streams.info(WORK_STREAM)).state.messages;
        for (let i = 0; i < 50 && messages > 0; i++) {
          await new Promise((resolve) => setTimeout(resolve, 100));
          messages = (await inspect.streams.info(WORK_STREAM)).state.messages;
        }
        expect(messages).toBe(0);
      } finally {
        await admin.close();
      }
      expect(reports).toEqual([]);
    } finally {
      await coordinator.stop('interrupt');
      abandoned.stop();
      await planner.stop('abort');
      void taking.catch(() => undefined);
    }
  }, 30_000);
});
