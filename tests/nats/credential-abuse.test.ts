import { AckPolicy, jetstream, jetstreamManager, RetentionPolicy } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NatsBus } from '../../src/bus/nats-bus.js';
import { type SecuredNatsServer, startSecuredNatsServer } from '../support/nats-server.js';

/**
 * What a holder of one role's credential can try beyond sending what its role sends, on a server
 * started from `pge nats-config` with no pge process but a coordinator's bus (which makes the
 * streams and consumers) and subscriptions that stand in for a coordinator's.
 *
 * A request from a role's account crosses into `PGE` through a service import, and the server keeps
 * a way back for its reply subject until the answer or the export's response threshold. Messages
 * nobody answers cross as a stream instead, so reply subjects on them cost the server nothing:
 * measured as the server's memory (its monitoring endpoint) across a flood.
 */

const FLOOD = 200_000;

let nats: SecuredNatsServer;
let coordinatorBus: NatsBus;
let coordinator: NatsConnection;
let client: NatsConnection;

beforeAll(async () => {
  nats = await startSecuredNatsServer({ monitor: true });
  coordinatorBus = await NatsBus.connect({ servers: nats.url, credsFile: nats.creds.coordinator });
  coordinator = await connect(nats.connectOptions('coordinator'));
  for (const subject of ['pge.runs.submit', 'pge.run.*.control']) coordinator.subscribe(subject);
  await coordinator.flush();
  client = await connect(nats.connectOptions('client'));
});

afterAll(async () => {
  await client?.close();
  await coordinator?.close();
  await coordinatorBus?.close();
  await nats?.stop();
});

/** The growth of the server's memory while the client floods `subject`, each message with a reply subject. */
async function growthOf(subject: string): Promise<number> {
  const mem = async () => ((await (await fetch(`${nats.monitorUrl}/varz`)).json()) as { mem: number }).mem;
  const before = await mem();
  for (let i = 0; i < FLOOD; i++) {
    client.publish(subject, '{}', { reply: `_INBOX_client.flood.${i}` });
    if (i % 10_000 === 0) await client.flush();
  }
  await client.flush();
  await coordinator.flush();
  return (await mem()) - before;
}

describe('reply subjects across accounts', () => {
  it('keeps no way back for a reply subject on control, which nobody answers: a flood costs the server nothing', async () => {
    expect(await growthOf('pge.run.flood.control')).toBeLessThan(30e6);
    // The same flood of requests nobody answers keeps a way back for each until the response
    // threshold: the measure sees it.
    expect(await growthOf('pge.runs.submit')).toBeGreaterThan(60e6);
  }, 60_000);

  it("cannot have a worker's made-up acknowledgement remove another role's work item", async () => {
    const admin = await connect(nats.connectOptions('admin'));
    const planner = await connect(nats.connectOptions('planner'));
    try {
      const js = jetstream(admin);
      const jsm = await jetstreamManager(admin);
      // A generator's work item, waiting for a generator: the planner acknowledges its sequence
      // through the planners' consumer, as nats-server 2.9 takes it.
      const { seq } = await js.publish('pge.work.generator', JSON.stringify({ probe: true }));
      planner.publish(`$JS.ACK.PGE_WORK.pge-planner.1.${seq}.1.0.0`, '');
      planner.publish(`$JS.ACK.PGE_WORK.pge-planner.1.${seq}.1.0.0`, '+TERM');
      await planner.flush();
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect((await jsm.consumers.info('PGE_WORK', 'pge-generator')).num_pending).toBe(1);
      await jsm.streams.purge('PGE_WORK');
      // The same acknowledgement on a work-queue stream (the test's own) removes the item.
      await jsm.streams.add({
        name: 'PROBE_QUEUE',
        subjects: ['probe.queue.>'],
        retention: RetentionPolicy.Workqueue,
      });
      for (const durable of ['planner', 'generator'])
        await jsm.consumers.add('PROBE_QUEUE', {
          durable_name: durable,
          filter_subject: `probe.queue.${durable}`,
          ack_policy: AckPolicy.Explicit,
        });
      const probe = await js.publish('probe.queue.generator', 'an item');
      admin.publish(`$JS.ACK.PROBE_QUEUE.planner.1.${probe.seq}.1.0.0`, '');
      await admin.flush();
      await expect.poll(async () => (await jsm.streams.info('PROBE_QUEUE')).state.messages).toBe(0);
      await jsm.streams.delete('PROBE_QUEUE');
    } finally {
      await planner.close();
      await admin.close();
    }
  });
});
