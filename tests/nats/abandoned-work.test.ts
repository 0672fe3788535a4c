import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DemoModel } from '../../src/actors/demo-model.js';
import { createRoleWorker } from '../../src/actors/role-worker.js';
import { resolveOptions } from '../../src/api/options.js';
import { answerAbandonedWork } from '../../src/bus/abandoned-work.js';
import { subscribeEvents } from '../../src/bus/channels.js';
import { NatsBus } from '../../src/bus/nats-bus.js';
import { ensurePullConsumer, WORK_STREAM } from '../../src/bus/nats-streams.js';
import { subjects, workerQueue } from '../../src/bus/subjects.js';
import { startCoordinatorService } from '../../src/runtime/services.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { type NatsServerHandle, startNatsServer } from '../support/nats-server.js';

/**
 * A request that every worker dies holding: JetStream stops delivering it after the consumer's
 * `max_deliver`, and the coordinator's side answers it as failed at once (`WorkAbandonedError`),
 * so the run ends instead of waiting for its call deadline.
 */

let nats: NatsServerHandle;
let bus: NatsBus;
let dying: NatsConnection;
beforeEach(async () => {
  nats = await startNatsServer();
  bus = await NatsBus.connect({ servers: nats.url });
  dying = await connect({ servers: nats.url });
});
afterEach(async () => {
  await dying.close();
  await bus.close();
  await nats.stop();
});

describe('abandoned work', () => {
  it('is answered with a failed result after max_deliver deliveries, and removed from the queue', async () => {
    const model = new DemoModel();
    const planner = createRoleWorker({ bus, role: 'planner', model });
    // Generators that take the request and die before answering: they never ack, and the server
    // delivers the item again after each ack wait, twice in all.
    const jsm = await jetstreamManager(dying);
    await ensurePullConsumer(jsm, {
      stream: WORK_STREAM,
      durable: workerQueue('generator'),
      filter: subjects.work('generator'),
      ackWaitMs: 300,
      maxDeliver: 2,
      maxAckPending: 1000,
    });
    const consumer = await jetstream(dying).consumers.get(WORK_STREAM, workerQueue('generator'));
    let deliveries = 0;
    const taking = (async () => {
      for await (const _msg of await consumer.consume({ max_messages: 1, expires: 1000 })) deliveries++;
    })();
    const reports: unknown[] = [];
    const abandoned = answerAbandonedWork(bus, (error) => reports.push(error));
    const coordinator = startCoordinatorService({
      bus,
      options: resolveOptions({ workingDirectory: '/tmp' }),
      models: { planner: model.name, generator: model.name, evaluator: model.name },
    });
    try {
      const events: RunEvent[] = [];
      const closed = new Promise<void>((resolve) =>
        subscribeEvents(bus, '*', (event) => {
          events.push(event);
          if (event.type === 'run.completed' || event.type === 'run.failed') resolve();
        }),
      );
      await bus.request(subjects.submit, { task: 'a poison request' });
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
      let messages = (await jsm.streams.info(WORK_STREAM)).state.messages;
      for (let i = 0; i < 50 && messages > 0; i++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        messages = (await jsm.streams.info(WORK_STREAM)).state.messages;
      }
      expect(messages).toBe(0);
      expect(reports).toEqual([]);
    } finally {
      await coordinator.stop('interrupt');
      abandoned.stop();
      await planner.stop('abort');
      void taking.catch(() => undefined);
    }
  }, 30_000);
});
