import { afterEach, describe, expect, it } from 'vitest';
import { enqueueWork, serveWork } from '../../src/bus/channels.js';
import { NatsBus } from '../../src/bus/nats-bus.js';
import type { RoleRequest } from '../../src/schemas/index.js';
import { freshRunId } from '../bus/bus-contract.js';
import { fullRun } from '../persistence/fixtures.js';
import { until } from '../support/deployment.js';
import { type NatsServerHandle, startNatsServer } from '../support/nats-server.js';

/**
 * A request answered just before nats-server crashes is not handed out again: the bound of
 * docs/distributed.md ("at most the one call in flight at each fault") holds for the requests a
 * worker acknowledged before the crash. nats-server 2.9 keeps a consumer's latest acks in memory
 * for a moment before it writes them, and a SIGKILL then forgets them; pge's work items are kept
 * by interest, so an ack removes the item, and the server does not forget that. A consumer of a
 * stream that keeps its messages (limits retention) would deliver every forgotten one again.
 */

let server: NatsServerHandle | undefined;
const buses: NatsBus[] = [];
afterEach(async () => {
  await Promise.all(buses.splice(0).map((bus) => bus.close()));
  await server?.stop();
});

const open = async (settings: Parameters<typeof NatsBus.connect>[0]): Promise<NatsBus> => {
  const bus = await NatsBus.connect({ servers: server!.url, onHandlerError: () => undefined, ...settings });
  buses.push(bus);
  return bus;
};

describe('a nats-server crash right after requests were answered', () => {
  it('hands none of them out again', async () => {
    server = await startNatsServer();
    // The coordinator makes the streams and the consumers; a short ack wait, so that a forgotten
    // ack would show within the test.
    const producer = await open({ reporter: 'coordinator', ackWaitMs: 1_000 });
    const worker = await open({ ackWaitMs: 1_000 });
    const runId = freshRunId();
    const template = fullRun(runId).find((event) => event.type === 'step.work.requested') as RoleRequest;
    const handled: string[] = [];
    serveWork(worker, 'generator', async (request) => void handled.push(request.id), 4);
    await worker.flush();

    const total = 20;
    for (let n = 1; n <= total; n++)
      await enqueueWork(producer, { ...template, id: `${runId}-req-${n}`, seq: n });
    await until(
      () => handled.length,
      (count) => count === total,
      'every request answered',
      10_000,
    );
    // Every ack is at the server (flush waits for its answer), and then the server dies at once.
    await worker.flush();
    await server.restart(300, { crash: true, frozenMs: 0 });

    // Longer than the ack wait, after the worker's reconnect: anything the server forgot comes back.
    await until(
      () =>
        worker.flush().then(
          () => true,
          () => false,
        ),
      (flushed) => flushed,
      'the worker to reconnect',
      15_000,
    );
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    expect(handled.sort()).toEqual(Array.from({ length: total }, (_, i) => `${runId}-req-${i + 1}`).sort());
  }, 30_000);
});
