import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { AckPolicy, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HarnessResult } from '../../src/api/result.js';
import type { NatsRole } from '../../src/bus/permissions.js';
import { SUBMIT_ANSWER_MS } from '../../src/bus/subjects.js';
import { readLogFile } from '../../src/persistence/index.js';
import type { RunEvent, RunEventOf } from '../../src/schemas/index.js';
import { passingAnswer, readRunToEnd, schemaOf } from '../support/deployment.js';
import { type FakeOpenAI, type FakeStep, startFakeOpenAI } from '../support/fake-openai-server.js';
import { type SecuredNatsServer, startSecuredNatsServer } from '../support/nats-server.js';
import { type PgeProcess, startPge, startWorkersAtOnce } from '../support/processes.js';

/**
 * The distributed deployment as users run it: separate `pge worker` processes (coordinator,
 * persistence, planner, evaluator, three generators) on a private nats-server started from
 * `pge nats-config`, each with its role's credential, models served by a scripted
 * OpenAI-compatible server, runs submitted by a client that imports nothing from pge and holds the
 * `client` credential.
 */

const HANGING_TASK = 'a task whose work hangs';

// biome-ignore lint/suspicious/noExplicitAny: the request body as the SDK sent it.
function answer(body: any): FakeStep {
  // The task that hangs: its work call takes a minute, unless the client gives up first.
  if (schemaOf(body) === 'pge_work' && JSON.stringify(body.messages).includes(HANGING_TASK))
    return passingAnswer(body, 60_000);
  // A model that takes a while, so that work overlaps and every generator gets some.
  return passingAnswer(body, 40);
}

let nats: SecuredNatsServer;
let openai: FakeOpenAI;
let logs: string;
const processes: PgeProcess[] = [];

beforeAll(async () => {
  nats = await startSecuredNatsServer();
  openai = await startFakeOpenAI();
  openai.script(answer);
  logs = mkdtempSync(join(tmpdir(), 'pge-dist-'));
  const models = {
    OPENAI_BASE_URL: openai.url,
    OPENAI_API_KEY: 'sk-test-distributed',
    PGE_MODEL: 'test-model',
  };
  const roles: [NatsRole, string[]][] = [
    ['coordinator', []],
    ['persistence', ['--working-dir', logs]],
    ['planner', []],
    ['evaluator', ['--concurrency', '4']],
    ['generator', ['--concurrency', '1', '--worker-id', 'gen-a']],
    ['generator', ['--concurrency', '1', '--worker-id', 'gen-b']],
    ['generator', ['--concurrency', '1', '--worker-id', 'gen-c']],
  ];
  await startWorkersAtOnce(roles, (role) => ({ ...nats.env(role), ...models }), processes);
}, 60_000);

afterAll(async () => {
  const codes = await Promise.all(processes.map((p) => p.stop('SIGTERM')));
  await openai?.close();
  await nats?.stop();
  rmSync(logs, { recursive: true, force: true });
  // Every process drained and exited cleanly on SIGTERM, and did its job within its credential.
  expect(codes).toEqual(processes.map(() => 0));
  expect(nats.refusals()).toEqual([]);
}, 60_000);

/**
 * Submits a run with plain nats.js (the `client` credential) and reads its events from JetStream
 * in order until it closes; `meanwhile` gets the run id and the connection while the events are read.
 */
async function submitAndRead(
  task: string,
  meanwhile?: (runId: string, nc: Awaited<ReturnType<typeof connect>>) => Promise<void>,
): Promise<RunEvent[]> {
  const nc = await connect(nats.connectOptions('client'));
  try {
    const reply = await nc.request('pge.runs.submit', JSON.stringify({ task }), {
      timeout: SUBMIT_ANSWER_MS,
    });
    const { runId } = reply.json<{ runId: string }>();
    const side = meanwhile?.(runId, nc);
    const events = await readRunToEnd(nc, runId);
    await side;
    return events;
  } finally {
    await nc.close();
  }
}

describe('distributed deployment on NATS', () => {
  it('runs concurrent submissions across separate worker processes; each work item is handled once', async () => {
    const runs = await Promise.all(['task one', 'task two', 'task three'].map((task) => submitAndRead(task)));
    for (const events of runs) {
      expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
      expect(events.at(-1)).toMatchObject({
        type: 'run.completed',
        payload: { passed: true, stepsTotal: 3 },
      });
    }
    const all = runs.flat();
    const workRequests = all.filter((e) => e.type === 'step.work.requested').map((e) => e.id);
    const workCalls = all.filter((e) => e.type === 'model.call.completed' && e.payload.phase === 'work');
    expect(workRequests).toHaveLength(9);
    // Exactly one model call per work request: no request was handled twice.
    expect(workCalls.map((e) => e.type === 'model.call.completed' && e.payload.requestId).sort()).toEqual(
      [...workRequests].sort(),
    );
    const workers = new Set(workCalls.map((e) => e.type === 'model.call.completed' && e.payload.worker));
    expect(workers).toEqual(new Set(['gen-a', 'gen-b', 'gen-c']));
    expect(
      openai.completions().filter((r) => r.body?.response_format?.json_schema?.name === 'pge_work'),
    ).toHaveLength(9);
  }, 60_000);

  it('the persistence worker writes each run log from the stream, identical to the events', async () => {
    const events = await submitAndRead('task four');
    const runId = events[0]!.runId;
    const path = join(logs, `pge_shared_state_${runId}.md`);
    let logged: RunEvent[] = [];
    for (let i = 0; i < 100 && logged.length < events.length; i++) {
      await new Promise((r) => setTimeout(r, 50));
      if (readdirSync(logs).includes(`pge_shared_state_${runId}.md`))
        logged = await readLogFile(path).catch(() => []);
    }
    expect(logged).toEqual(events);
  }, 30_000);

  it('pge run --nats submits to the deployment, shows progress and exits like a local run', async () => {
    const run = startPge(
      ['run', 'Write a haiku', '--nats', nats.url, '--creds', nats.creds.client, '--json'],
      { OPENAI_API_KEY: 'sk-test-client' },
    );
    const code = await run.exited();
    expect(code, run.stderr()).toBe(0);
    const result = JSON.parse(run.stdout()) as HarnessResult;
    expect(result).toMatchObject({ status: 'completed', passed: true, totalSteps: 3 });
    expect(run.stderr()).toMatch(/plan created: 3 steps/);
    expect(readdirSync(logs)).toContain(`pge_shared_state_${result.runId}.md`);
  }, 30_000);

  it('pge run --nats --plan submits the plan: no planner is asked, the file names the task', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pge-dist-plan-'));
    const file = join(dir, 'plan.json');
    const step = (id: string, dependsOn: string[] = []) => ({
      id,
      title: `Part ${id}`,
      description: `write part ${id}`,
      expectedOutput: `part ${id}`,
      dependsOn,
    });
    const plan = {
      version: 1,
      task: 'Write a two-part guide',
      steps: [step('one'), step('two', ['one'])],
      criteria: [{ name: 'accuracy', threshold: 7 }, { name: 'clarity' }],
    };
    writeFileSync(file, JSON.stringify(plan));
    const since = openai.completions().length;
    try {
      const run = startPge(
        ['run', '--plan', file, '--nats', nats.url, '--creds', nats.creds.client, '--json'],
        {
          OPENAI_API_KEY: 'sk-test-client',
        },
      );
      const code = await run.exited();
      expect(code, run.stderr()).toBe(0);
      const result = JSON.parse(run.stdout()) as HarnessResult;
      expect(result).toMatchObject({ status: 'completed', passed: true, totalSteps: 2 });
      expect(result.plan?.steps.map((s) => s.id)).toEqual(['one', 'two']);
      expect(run.stderr()).toContain(`plan given (${file}), not planned`);
      const schemas = openai
        .completions()
        .slice(since)
        .map((r) => r.body?.response_format?.json_schema?.name);
      expect(schemas).not.toContain('pge_plan');
      expect(schemas.filter((s) => s === 'pge_work')).toHaveLength(2);
      const path = join(logs, `pge_shared_state_${result.runId}.md`);
      for (let i = 0; i < 100 && !readdirSync(logs).includes(basename(path)); i++)
        await new Promise((r) => setTimeout(r, 50));
      const started = (await readLogFile(path))[0] as RunEventOf<'run.started'>;
      expect(started.payload.task).toBe('Write a two-part guide');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);

  it('an interrupt sent over NATS cancels the call in flight: the generator aborts its HTTP request', async () => {
    const hanging = () =>
      openai
        .completions()
        .filter(
          (r) =>
            r.body?.response_format?.json_schema?.name === 'pge_work' &&
            JSON.stringify(r.body.messages).includes(HANGING_TASK),
        );
    const events = await submitAndRead(HANGING_TASK, async (runId, nc) => {
      for (let i = 0; i < 500 && hanging().length === 0; i++) await new Promise((r) => setTimeout(r, 20));
      expect(hanging()).toHaveLength(1);
      // Any client may steer a run through its control subject, as an operator would.
      const control = {
        runId,
        action: 'interrupt',
        reason: 'stopped by the test',
        ts: new Date().toISOString(),
      };
      nc.publish(`pge.run.${runId}.control`, JSON.stringify(control));
    });
    expect(events.at(-1)).toMatchObject({ type: 'run.failed', payload: { reason: 'interrupted' } });
    const cancelled = events.at(-2);
    expect(cancelled).toMatchObject({ type: 'request.cancelled', payload: { phase: 'work' } });
    for (let i = 0; i < 250 && hanging()[0]!.abortedAt === null; i++)
      await new Promise((r) => setTimeout(r, 20));
    expect(hanging()[0]!.abortedAt).not.toBeNull();
    // The work item was acked, not handed back: nothing pending or redelivered on the generators' consumer.
    // (The test's inspection, with its admin credential: no client may look at the work queue.)
    const nc = await connect(nats.connectOptions('admin'));
    try {
      const jsm = await jetstreamManager(nc);
      let info = await jsm.consumers.info('PGE_WORK', 'pge-generator');
      for (let i = 0; i < 100 && info.num_ack_pending > 0; i++) {
        await new Promise((r) => setTimeout(r, 20));
        info = await jsm.consumers.info('PGE_WORK', 'pge-generator');
      }
      expect(info.num_ack_pending).toBe(0);
      expect(info.num_redelivered).toBe(0);
    } finally {
      await nc.close();
    }
    expect(hanging()).toHaveLength(1);
  }, 30_000);

  it('streams and consumers exist without any manual setup', async () => {
    // The test's inspection, with its admin credential: no role lists streams or consumers.
    const nc = await connect(nats.connectOptions('admin'));
    try {
      const jsm = await jetstreamManager(nc);
      const names: string[] = [];
      for await (const s of jsm.streams.list()) names.push(s.config.name);
      // The run leases' KV bucket is a stream too.
      expect(names.sort()).toEqual(['KV_pge-runs', 'PGE_EVENTS', 'PGE_RESULTS', 'PGE_WORK']);
      const consumers: string[] = [];
      for await (const c of jsm.consumers.list('PGE_WORK')) consumers.push(c.name);
      expect(consumers.sort()).toEqual(['pge-evaluator', 'pge-generator', 'pge-planner']);
      for await (const c of jsm.consumers.list('PGE_WORK'))
        expect(c.config.ack_policy, c.name).toBe(AckPolicy.Explicit);
      // Persistence reads the stream in order, so one ack covers a batch.
      const durable = await jsm.consumers.info('PGE_EVENTS', 'pge-persistence');
      expect(durable.config.ack_policy).toBe(AckPolicy.All);
    } finally {
      await nc.close();
    }
  });
});

describe('an unreachable NATS server', () => {
  it('makes pge worker and pge run --nats exit 2 within seconds, saying where they tried', async () => {
    for (const args of [
      ['worker', '--role', 'planner', '--demo', '--nats', 'nats://127.0.0.1:1'],
      ['run', 'Write a haiku', '--nats', 'nats://127.0.0.1:1'],
    ]) {
      const started = Date.now();
      const p = startPge(args, { OPENAI_API_KEY: 'sk-test-unreachable' });
      const code = await p.exited();
      expect(code, p.stderr()).toBe(2);
      expect(p.stderr()).toMatch(/cannot connect to NATS at nats:\/\/127\.0\.0\.1:1/);
      expect(Date.now() - started).toBeLessThan(10_000);
    }
  }, 30_000);
});
