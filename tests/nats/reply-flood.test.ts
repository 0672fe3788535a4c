import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SecuredNatsServer, startSecuredNatsServer } from '../support/nats-server.js';

/**
 * A request from a role's account crosses into `PGE` through a service import, and the server keeps
 * a way back for its reply subject until the answer or the export's response threshold. Messages
 * nobody answers cross as a stream instead, so reply subjects on them cost the server nothing:
 * measured as the server's memory (its monitoring endpoint) across a flood, on a server of this
 * file's own with no pge process (a coordinator's subscription that never answers stands in).
 */

const FLOOD = 200_000;

let nats: SecuredNatsServer;
let coordinator: NatsConnection;
let client: NatsConnection;

beforeAll(async () => {
  nats = await startSecuredNatsServer({ monitor: true });
  coordinator = await connect(nats.connectOptions('coordinator'));
  for (const subject of ['pge.runs.submit', 'pge.run.*.control']) coordinator.subscribe(subject);
  await coordinator.flush();
  client = await connect(nats.connectOptions('client'));
});

afterAll(async () => {
  await client?.close();
  await coordinator?.close();
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
});
