import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHost } from '../../src/api/host.js';
import { NatsBus } from '../../src/bus/nats-bus.js';
import { type RunClient, runClient } from '../../src/runtime/run-client.js';
import type { RunEventOf } from '../../src/schemas/index.js';
import { stepsAskedSince } from '../support/continue-fixtures.js';
import { type FakeOpenAI, startFakeOpenAI } from '../support/fake-openai-server.js';
import { type SecuredNatsServer, startSecuredNatsServer } from '../support/nats-server.js';
import type { PgeProcess } from '../support/processes.js';
import { answers, schemaOf, scriptedStep, startWorkers, taskHas } from '../support/scripted-deployment.js';

/**
 * One host, two buses: the same client (`runClient`) acts on the runs of the embedded host (the
 * coordinator service, workers and persistence on the in-process bus, its store the logs of a
 * working directory) and of a deployment of `pge worker` processes on a secured nats-server (the
 * client credential), and every assertion below holds on both. Submitting, listing, deciding a
 * gate, cancelling, forking and resuming are the host's, whichever bus carries them.
 */

/** A task whose work takes a minute: a run that is busy when it is cancelled. */
const SLOW = 'a task whose work takes a minute';

let openai: FakeOpenAI;
beforeAll(async () => {
  openai = await startFakeOpenAI();
  openai.script((body) => {
    const schema = schemaOf(body);
    const slow = taskHas(body, SLOW) && schema === 'pge_work';
    return scriptedStep(schema ? answers(9, 3)[schema] : undefined, slow ? 60_000 : 0);
  });
}, 30_000);
afterAll(async () => {
  await openai?.close();
});

interface Host {
  client: RunClient;
  close(): Promise<void>;
}

/** The embedded host of this process, its logs in a directory of its own. */
async function embedded(): Promise<Host> {
  const dir = mkdtempSync(join(tmpdir(), 'pge-host-'));
  const host = startHost({
    modelName: 'test-model',
    baseURL: openai.url,
    apiKey: 'sk-test-host',
    workingDirectory: dir,
    maxRetries: 0,
  });
  return {
    client: runClient(host.bus, () => host.close()),
    async close() {
      await host.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A deployment of `pge worker` processes on a secured nats-server; the client has the client credential. */
async function deployment(): Promise<Host> {
  const nats: SecuredNatsServer = await startSecuredNatsServer();
  const logs = mkdtempSync(join(tmpdir(), 'pge-host-logs-'));
  const workers: PgeProcess[] = await startWorkers(
    (role) => ({
      ...nats.env(role),
      OPENAI_API_KEY: 'sk-test-host',
      OPENAI_BASE_URL: openai.url,
      PGE_MODEL: 'test-model',
    }),
    logs,
  );
  const bus = await NatsBus.connect({ servers: nats.url, credsFile: nats.creds.client, name: 'pge-test' });
  return {
    client: runClient(bus, () => bus.close()),
    async close() {
      await bus.close();
      await Promise.all(workers.map((w) => w.stop('SIGTERM')));
      await nats.stop();
      rmSync(logs, { recursive: true, force: true });
    },
  };
}

describe.each([
  ['embedded, on the in-process bus', embedded],
  ['a deployment, on NATS', deployment],
])('the run host: %s', (_, start) => {
  let host: Host;
  beforeAll(async () => {
    host = await start();
  }, 90_000);
  afterAll(async () => {
    await host?.close();
  }, 60_000);

  it('lists a run waiting at its plan gate, decides it, and lists it passed', async () => {
    const { client } = host;
    const { runId, closing } = await client.submit({
      task: 'Write a guide to rivers',
      options: { approve: ['plan'] },
    });
    await expect
      .poll(async () => (await client.list({ statuses: ['waiting'] })).map((r) => r.runId), {
        timeout: 20_000,
      })
      .toEqual([runId]);
    const [pending] = (await client.approvals()).filter((p) => p.runId === runId);
    expect(pending).toMatchObject({ runId, gate: 'plan' });
    const decided = await client.approve(
      runId,
      'plan',
      { decision: 'approve', reason: null, by: 'ada' },
      { requestId: pending!.requestId },
    );
    expect(decided.payload).toMatchObject({ decision: 'approve', by: 'ada' });
    expect(await closing).toMatchObject({ type: 'run.completed', payload: { passed: true } });
    await expect
      .poll(async () => (await client.list()).find((r) => r.runId === runId)?.status, { timeout: 20_000 })
      .toBe('passed');
  }, 60_000);

  it('forks the run that passed from its step 2: no planner call, nothing asked about step 1', async () => {
    const { client } = host;
    const parent = await client.submit({ task: 'Write a guide to lakes' });
    expect((await parent.closing).type).toBe('run.completed');
    // Recorded in the host's store before the fork reads it.
    await expect
      .poll(async () => (await client.list()).find((r) => r.runId === parent.runId)?.status)
      .toBe('passed');
    const since = openai.completions().length;
    const fork = await client.submit({ fork: { runId: parent.runId, fromStep: 2 }, by: 'ada' });
    const events: RunEventOf<'run.started'>[] = [];
    const follower = client.follow(fork.runId, {
      onEvent: (e) => {
        if (e.type === 'run.started') events.push(e);
      },
    });
    expect(await fork.closing).toMatchObject({ type: 'run.completed', payload: { passed: true } });
    await follower.closing;
    expect(events[0]!.payload).toMatchObject({
      startedBy: 'ada',
      parent: { runId: parent.runId, fromStep: 2 },
    });
    expect(stepsAskedSince(openai, since)).toEqual([2, 3]);
  }, 60_000);

  it('cancels a busy run: its closing event names who cancelled it', async () => {
    const { client } = host;
    const { runId, closing } = await client.submit({ task: SLOW });
    await expect
      .poll(async () => (await client.list()).find((r) => r.runId === runId)?.lastEvent, { timeout: 20_000 })
      .toBe('step.work.requested');
    const cancelled = await client.cancel(runId, 'ada', 'wrong task');
    expect(cancelled.closing.payload).toMatchObject({
      reason: 'cancelled',
      cancelled: { by: 'ada', reason: 'wrong task' },
    });
    expect((await closing).type).toBe('run.failed');
    await expect(client.cancel(runId, 'ada', null)).rejects.toThrow(/has ended/);
  }, 60_000);

  it('refuses to resume a run that has ended, and one it never started', async () => {
    const { client } = host;
    const { runId, closing } = await client.submit({ task: 'Write a guide to ponds' });
    await closing;
    await expect(client.resume(runId)).rejects.toThrow(/has ended|embedded/);
    await expect(client.resume('pge-no-such-run')).rejects.toThrow(/no run pge-no-such-run|embedded/);
  }, 60_000);
});
