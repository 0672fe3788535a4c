import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AckPolicy, jetstream, jetstreamManager, RetentionPolicy } from '@nats-io/jetstream';
import { connect, type NatsConnection, nanos } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HarnessResult } from '../../src/api/result.js';
import { PGE_STREAMS } from '../../src/bus/nats-streams.js';
import { NATS_ROLES } from '../../src/bus/permissions.js';
import { LEASE_BUCKET } from '../../src/bus/run-leases.js';
import { SUBMIT_ANSWER_MS } from '../../src/bus/subjects.js';
import { readLogFile } from '../../src/persistence/index.js';
import type { Role, RunEvent } from '../../src/schemas/index.js';
import { ROLES } from '../../src/schemas/setting-values.js';
import { readRunToEnd } from '../support/deployment.js';
import { type FakeOpenAI, startFakeOpenAI } from '../support/fake-openai-server.js';
import { type SecuredNatsServer, startSecuredNatsServer } from '../support/nats-server.js';
import { type PgeProcess, startPge, startWorkersAtOnce } from '../support/processes.js';
import { answers, schemaOf, scriptedStep, taskHas } from '../support/scripted-deployment.js';

/**
 * A deployment started from `pge nats-config`: every process connects with its role's credential,
 * and an outsider holding the `client` credential tries each forgery that worked on an open
 * server. Each is refused by the server, and the run it aimed at ends exactly as an untouched run.
 */

/** Tasks with this marker are scored 3/10 against a threshold of 7: with no retry, they fail. */
const FAILING = 'a task its evaluator fails';

let nats: SecuredNatsServer;
let openai: FakeOpenAI;
let logs: string;
const processes: PgeProcess[] = [];

beforeAll(async () => {
  nats = await startSecuredNatsServer();
  openai = await startFakeOpenAI();
  openai.script((body) => scriptedStep(answers(taskHas(body, FAILING) ? 3 : 9)[schemaOf(body) ?? ''], 20));
  logs = mkdtempSync(join(tmpdir(), 'pge-secure-'));
  const models = { OPENAI_BASE_URL: openai.url, OPENAI_API_KEY: 'sk-test-secure', PGE_MODEL: 'test-model' };
  const roles = [
    ['coordinator', []],
    ['persistence', ['--working-dir', logs]],
    ['planner', []],
    ['generator', []],
    ['evaluator', []],
  ] as const;
  await startWorkersAtOnce(roles, (role) => ({ ...nats.env(role), ...models }), processes, 60_000);
}, 90_000);

afterAll(async () => {
  const codes = await Promise.all(processes.map((p) => p.stop('SIGTERM')));
  await openai?.close();
  await nats?.stop();
  if (logs) rmSync(logs, { recursive: true, force: true });
  expect(codes).toEqual(processes.map(() => 0));
}, 60_000);

/** Submits a run as the client credential allows (no retries), and returns its id. */
async function submit(nc: NatsConnection, task: string): Promise<string> {
  const submission = { task, options: { maxRetriesPerStep: 0 } };
  const reply = await nc.request('pge.runs.submit', JSON.stringify(submission), {
    timeout: SUBMIT_ANSWER_MS,
  });
  return reply.json<{ runId: string }>().runId;
}

/** The run as it would read to anyone comparing two runs: what happened, in order, and the verdict. */
function outcome(events: readonly RunEvent[]) {
  const closing = events.at(-1)!;
  return {
    types: events.map((e) => e.type),
    closing: closing.type === 'run.completed' ? { passed: closing.payload.passed } : closing.payload,
  };
}

const modelCalls = (schema: string) => openai.completions().filter((r) => schemaOf(r.body) === schema).length;

/** Waits for the log of `runId` to hold `count` events, and returns them. */
async function loggedEvents(runId: string, count: number): Promise<RunEvent[]> {
  const file = `pge_shared_state_${runId}.md`;
  let logged: RunEvent[] = [];
  for (let i = 0; i < 200 && logged.length < count; i++) {
    if (readdirSync(logs).includes(file)) logged = await readLogFile(join(logs, file)).catch(() => []);
    if (logged.length < count) await new Promise((r) => setTimeout(r, 50));
  }
  return logged;
}

/** Expects `attempt` to be refused by the server's permissions. */
async function refused(what: string, attempt: () => Promise<unknown>): Promise<void> {
  await expect(attempt(), what).rejects.toThrow(/Permissions Violation/);
}

describe('a deployment started from pge nats-config', () => {
  it('refuses a connection without a credential, from a client and from pge', async () => {
    await expect(connect({ servers: nats.url, reconnect: false })).rejects.toThrow(/Authorization Violation/);
    const run = startPge(['run', 'Write a haiku', '--nats', nats.url], { OPENAI_API_KEY: 'sk-test-none' });
    expect(await run.exited()).toBe(2);
    expect(run.stderr()).toMatch(/cannot connect to NATS at .*Authorization Violation/);
  }, 30_000);

  it('runs pge run --nats with the client credential and pge follow with the observer one', async () => {
    const run = startPge(
      ['run', 'Write a haiku', '--nats', nats.url, '--creds', nats.creds.client, '--json'],
      {
        OPENAI_API_KEY: 'sk-test-client',
      },
    );
    expect(await run.exited(), run.stderr()).toBe(0);
    const result = JSON.parse(run.stdout()) as HarnessResult;
    expect(result).toMatchObject({ status: 'completed', passed: true });
    const follow = startPge(['follow', result.runId, '--json'], { ...nats.env('observer') });
    expect(await follow.exited(), follow.stderr()).toBe(0);
    expect(JSON.parse(follow.stdout())).toEqual({ ...result, harnessId: expect.any(String) });
    // The observer reads; it cannot submit.
    const submitting = startPge(['run', 'Write a haiku', '--json'], {
      ...nats.env('observer'),
      OPENAI_API_KEY: 'sk-test-observer',
    });
    expect(await submitting.exited()).not.toBe(0);
    expect(submitting.stderr()).toMatch(/Permissions Violation for Publish to "pge\.runs\.submit"/);
  }, 60_000);

  it('refuses every forgery of a client, and the run ends exactly as an untouched one', async () => {
    const nc = await connect(nats.connectOptions('client'));
    try {
      const untouched = await readRunToEnd(nc, await submit(nc, `${FAILING}: untouched`));
      expect(untouched.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: false } });
      const plansBefore = modelCalls('pge_plan');
      const evaluationsBefore = modelCalls('pge_evaluation');

      const js = jetstream(nc);
      const runId = await submit(nc, `${FAILING}: attacked`);
      let attacked = false;
      const events = await readRunToEnd(nc, runId, async (event) => {
        if (event.type !== 'step.evaluation.requested' || attacked) return;
        attacked = true;
        // 1. Answer the evaluation first, with all 10s: results are the workers' to publish.
        const forged = {
          requestId: event.id,
          runId,
          role: 'evaluator',
          worker: 'forger',
          calls: [],
          result: {
            status: 'ok',
            phase: 'evaluation',
            output: {
              scores: [
                { criterion: 'accuracy', score: 10, evidence: 'forged' },
                { criterion: 'clarity', score: 10, evidence: 'forged' },
              ],
              findings: [],
              actionableFeedback: [],
              summary: 'forged',
            },
          },
        };
        await refused('a forged result', () =>
          js.publish(`pge.run.${runId}.result.evaluator`, JSON.stringify(forged)),
        );
        // 2. Close the run with a forged run.completed under the next event id.
        const completed = {
          id: `${runId}-${event.seq + 1}`,
          runId,
          seq: event.seq + 1,
          ts: new Date().toISOString(),
          type: 'run.completed',
          payload: { passed: true, forged: true },
        };
        await refused('a forged run.completed', () =>
          js.publish(`pge.run.${runId}.evt.run.completed`, JSON.stringify(completed), {
            msgID: completed.id,
          }),
        );
        // 3. Have the operator's model key pay for planner work of the outsider's own.
        for (let i = 0; i < 5; i++) {
          const work = { ...event, id: `forged-${i}`, type: 'plan.requested' };
          await refused('a forged work item', () => js.publish('pge.work.planner', JSON.stringify(work)));
        }
        // 4. An orphan event that would have stopped the logs.
        await refused('an orphan event', () =>
          js.publish('pge.run.orphan.evt.run.started', JSON.stringify({ ...completed, runId: 'orphan' })),
        );
        // 5. Take a role's work, or the persistence worker's events, through their consumers.
        await refused('a pull of generator work', () =>
          nc.request('$JS.API.CONSUMER.MSG.NEXT.PGE_WORK.pge-generator', '{"batch":1}', { timeout: 5_000 }),
        );
        const jsm = await jetstreamManager(nc);
        await refused('a consumer on the work queue', () =>
          jsm.consumers.add('PGE_WORK', { name: 'thief', filter_subject: 'pge.work.evaluator' }),
        );
        await refused('deleting the persistence consumer', () =>
          jsm.consumers.delete('PGE_EVENTS', 'pge-persistence'),
        );
        await refused('deleting a stream', () => jsm.streams.delete('PGE_EVENTS'));
        // 6. Rewrite the persistence worker's consumer through a create that does not name it in
        // its subject (the name in the body).
        const rewrite = {
          stream_name: 'PGE_EVENTS',
          config: { name: 'pge-persistence', filter_subject: 'pge.run.none.evt.>' },
        };
        await refused('a nameless consumer create', () =>
          nc.request('$JS.API.CONSUMER.CREATE.PGE_EVENTS', JSON.stringify(rewrite), { timeout: 5_000 }),
        );
        // 7. Have JetStream write its answer over the run's lease: a stray value, not a lease,
        // which its coordinator keeps (no takeover, no run.resumed) and overwrites.
        nc.publish('$JS.API.STREAM.INFO.PGE_EVENTS', '', { reply: `$KV.pge-runs.${runId}` });
      });

      expect(attacked).toBe(true);
      expect(outcome(events)).toEqual(outcome(untouched));
      expect(JSON.stringify(events)).not.toMatch(/forged|forger/);
      // The honest evaluator's verdict stood, and the outsider's planner work cost nothing.
      expect(modelCalls('pge_plan') - plansBefore).toBe(1);
      expect(modelCalls('pge_evaluation') - evaluationsBefore).toBe(
        untouched.filter((e) => e.type === 'step.evaluation.requested').length,
      );
      // The log holds exactly the run's events, as the stream does.
      expect(await loggedEvents(runId, events.length)).toEqual(events);
      expect(readdirSync(logs).some((file) => file.includes('orphan'))).toBe(false);
    } finally {
      await nc.close();
    }
  }, 90_000);

  it('answers a request only on an inbox, never on a reply subject the sender chose elsewhere', async () => {
    const client = await connect(nats.connectOptions('client'));
    const admin = await connect(nats.connectOptions('admin'));
    try {
      const elsewhere = '$KV.pge-runs.probe';
      const heard: string[] = [];
      admin.subscribe(elsewhere, {
        callback: (_, msg) => {
          heard.push(msg.string());
        },
      });
      await admin.flush();
      client.publish('pge.runs.resume', JSON.stringify({ runId: 'no-such-run' }), { reply: elsewhere });
      // The same request with an inbox is answered: the coordinator heard both.
      const answer = await client.request('pge.runs.resume', JSON.stringify({ runId: 'no-such-run' }), {
        timeout: 10_000,
      });
      expect(answer.string()).toMatch(/no-such-run/);
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(heard).toEqual([]);
    } finally {
      await client.close();
      await admin.close();
    }
  }, 30_000);

  it("cannot have JetStream store its answers: a reply subject another role's request names stays in that role's account", async () => {
    const streams = [...PGE_STREAMS.map((s) => s.name), `KV_${LEASE_BUCKET}`];
    // Where a stored answer would do harm: an event, a work item, an evaluator's result, a lease.
    const targets = [
      'pge.run.probe.evt.run.started',
      'pge.work.planner',
      'pge.run.probe.result.evaluator',
      `$KV.${LEASE_BUCKET}.probe`,
    ];
    const admin = await connect(nats.connectOptions('admin'));
    const jsm = await jetstreamManager(admin);
    const lastSeqs = async () =>
      Promise.all(streams.map(async (name) => (await jsm.streams.info(name)).state.last_seq));
    /** Asks for PGE_EVENTS' info as `role`, naming each target as the reply subject. */
    const probe = async (nc: NatsConnection) => {
      for (const reply of targets) nc.publish('$JS.API.STREAM.INFO.PGE_EVENTS', '', { reply });
      await nc.flush();
      await new Promise((resolve) => setTimeout(resolve, 300));
    };
    try {
      await admin.flush();
      for (const role of NATS_ROLES.filter((r) => r !== 'coordinator')) {
        const before = await lastSeqs();
        const nc = await connect(nats.connectOptions(role));
        try {
          await probe(nc);
        } finally {
          await nc.close();
        }
        expect(await lastSeqs(), role).toEqual(before);
      }
      // The same request in the streams' own account is stored wherever its reply subject says:
      // what every role could do when all were users of that account.
      const before = await lastSeqs();
      await probe(admin);
      const after = await lastSeqs();
      expect(after.filter((seq, i) => seq > before[i]!)).toHaveLength(streams.length);
    } finally {
      await admin.close();
    }
  }, 30_000);

  it("lets no role but the coordinator make, change or delete a consumer, such as one that delivers onto another's pulls", async () => {
    const admin = await connect(nats.connectOptions('admin'));
    const adminJsm = await jetstreamManager(admin);
    const consumers = async () => {
      const names: string[] = [];
      for (const stream of ['PGE_EVENTS', 'PGE_WORK'])
        for await (const c of adminJsm.consumers.list(stream)) names.push(`${stream}/${c.name}`);
      return names.sort();
    };
    try {
      const before = await consumers();
      expect(before).toEqual([
        'PGE_EVENTS/pge-persistence',
        'PGE_WORK/pge-evaluator',
        'PGE_WORK/pge-generator',
        'PGE_WORK/pge-planner',
      ]);
      for (const role of NATS_ROLES.filter((r) => r !== 'coordinator')) {
        const nc = await connect(nats.connectOptions(role));
        try {
          const jsm = await jetstreamManager(nc);
          const own = ROLES.includes(role as Role) ? `pge-${role}` : 'pge-persistence';
          // Each delivery target did harm when a reader could make a push consumer.
          const attempts = {
            'a pull consumer of its own': () =>
              jsm.consumers.add('PGE_EVENTS', { name: `probe-${role}`, filter_subject: 'pge.run.*.evt.>' }),
            "a push consumer onto a reporter's subject": () =>
              jsm.consumers.add('PGE_EVENTS', {
                name: `probe-${role}`,
                deliver_subject: 'pge.errors.rejected.coordinator',
              }),
            "a push consumer onto the planners' pulls": () =>
              jsm.consumers.add('PGE_EVENTS', {
                name: `probe-${role}`,
                deliver_subject: '$JS.API.CONSUMER.MSG.NEXT.PGE_WORK.pge-planner',
              }),
            "a push consumer onto the coordinators' queue": () =>
              jsm.consumers.add('PGE_EVENTS', {
                name: `probe-${role}`,
                deliver_subject: 'pge.runs.submit',
                deliver_group: 'pge-coordinator',
              }),
            'its own durable, remade as a push consumer': () =>
              jsm.consumers.add(own === 'pge-persistence' ? 'PGE_EVENTS' : 'PGE_WORK', {
                durable_name: own,
                deliver_subject: 'pge.runs.submit',
              }),
            'its own durable, set to go when idle': () =>
              jsm.consumers.update(own === 'pge-persistence' ? 'PGE_EVENTS' : 'PGE_WORK', own, {
                inactive_threshold: nanos(1_000),
              }),
            "persistence's durable, deleted": () => jsm.consumers.delete('PGE_EVENTS', 'pge-persistence'),
          };
          for (const [what, attempt] of Object.entries(attempts)) await refused(`${role}: ${what}`, attempt);
        } finally {
          await nc.close();
        }
      }
      expect(await consumers()).toEqual(before);
      expect((await adminJsm.streams.info('PGE_WORK')).config.name).toBe('PGE_WORK');
      // What such a consumer does, made by a user of the streams' account: each message it
      // delivers is a pull on another consumer (the test's own here), whose message then goes to
      // nobody and waits out its ack wait, as a planner's work item would.
      await adminJsm.streams.add({
        name: 'PROBE_WORK',
        subjects: ['probe.work'],
        retention: RetentionPolicy.Workqueue,
      });
      await adminJsm.consumers.add('PROBE_WORK', { durable_name: 'worker', ack_policy: AckPolicy.Explicit });
      await jetstream(admin).publish('probe.work', 'a work item');
      await adminJsm.streams.add({ name: 'PROBE_SOURCE', subjects: ['probe.source'] });
      await jetstream(admin).publish('probe.source', JSON.stringify({ type: 'run.started', seq: 1 }));
      await adminJsm.consumers.add('PROBE_SOURCE', {
        name: 'probe',
        deliver_subject: '$JS.API.CONSUMER.MSG.NEXT.PROBE_WORK.worker',
      });
      await expect
        .poll(async () => (await adminJsm.consumers.info('PROBE_WORK', 'worker')).num_ack_pending)
        .toBe(1);
      await adminJsm.streams.delete('PROBE_SOURCE');
      await adminJsm.streams.delete('PROBE_WORK');
    } finally {
      await admin.close();
    }
  }, 30_000);

  it("hears every role's rejection reports as a reader and an operator, each on its role's subject only", async () => {
    const listeners = ['observer', 'client', 'admin'] as const;
    const heard = new Map<string, string[]>(listeners.map((l) => [l, []]));
    const connections: NatsConnection[] = [];
    try {
      for (const listener of listeners) {
        const nc = await connect(nats.connectOptions(listener));
        connections.push(nc);
        nc.subscribe('pge.errors.rejected.*', {
          callback: (_error, msg) => void heard.get(listener)!.push(msg.subject),
        });
        await nc.flush();
      }
      const reporters = NATS_ROLES;
      for (const role of reporters) {
        const nc = await connect(nats.connectOptions(role));
        try {
          const report = {
            subject: 'pge.work.planner',
            problem: `probe of ${role}`,
            ts: new Date().toISOString(),
          };
          nc.publish(`pge.errors.rejected.${role}`, JSON.stringify(report));
          await nc.flush();
          // A report as another role: refused, so no listener hears a second report on its subject.
          const other = role === 'client' ? 'observer' : 'client';
          nc.publish(`pge.errors.rejected.${other}`, JSON.stringify({ ...report, problem: 'forged' }));
          await nc.flush();
        } finally {
          await nc.close().catch(() => undefined);
        }
      }
      const expected = reporters.map((role) => `pge.errors.rejected.${role}`).sort();
      await new Promise((resolve) => setTimeout(resolve, 300));
      for (const listener of listeners) expect([...heard.get(listener)!].sort(), listener).toEqual(expected);
      const forgeries = nats.refusals().filter((line) => line.includes('Subject "pge.errors.rejected.'));
      expect(forgeries).toHaveLength(reporters.length);
    } finally {
      for (const nc of connections) await nc.close();
    }
  }, 30_000);

  it("keeps each role's replies private: no other credential may subscribe to its inbox", async () => {
    const nc = await connect(nats.connectOptions('observer'));
    try {
      for (const inbox of ['_INBOX.>', '_INBOX_coordinator.>', '_INBOX_generator.>', '>']) {
        const refusal = new Promise<Error>((resolve) =>
          nc.subscribe(inbox, {
            callback: (error) => {
              if (error) resolve(error);
            },
          }),
        );
        expect(String(await refusal)).toContain(`Permissions Violation for Subscription to "${inbox}"`);
      }
    } finally {
      await nc.close();
    }
  });

  it('lets each role do only its part: a generator cannot answer for the evaluator or publish events', async () => {
    const nc = await connect(nats.connectOptions('generator'));
    try {
      const js = jetstream(nc);
      const result = { requestId: 'x', runId: 'r', role: 'evaluator', worker: 'w', calls: [], result: {} };
      await refused('an evaluator result from a generator', () =>
        js.publish('pge.run.r.result.evaluator', JSON.stringify(result)),
      );
      await refused('an event from a generator', () => js.publish('pge.run.r.evt.run.started', '{}'));
      await refused('work from a generator', () => js.publish('pge.work.planner', '{}'));
      await refused('a submission from a generator', () =>
        nc.request('pge.runs.submit', '{"task":"t"}', { timeout: 5_000 }),
      );
    } finally {
      await nc.close();
    }
  }, 30_000);

  it("lets only a client decide a run's gates: the persistence worker, which may interrupt a run, may not approve", async () => {
    const decision = {
      runId: 'r',
      action: 'approve',
      gate: 'plan',
      reason: null,
      by: 'forger',
      ts: new Date().toISOString(),
    };
    for (const role of ['persistence', 'coordinator', 'generator', 'observer'] as const) {
      const nc = await connect(nats.connectOptions(role));
      try {
        nc.publish('pge.run.r.approval', JSON.stringify(decision));
        await nc.flush();
      } finally {
        await nc.close().catch(() => undefined);
      }
    }
    const client = await connect(nats.connectOptions('client'));
    try {
      client.publish('pge.run.r.approval', JSON.stringify(decision));
      await client.flush();
    } finally {
      await client.close();
    }
    await new Promise((resolve) => setTimeout(resolve, 300));
    // Four refusals, one per role that is not a client; the client's decision went through.
    const refusedDecisions = nats.refusals().filter((line) => line.includes('Subject "pge.run.r.approval"'));
    expect(refusedDecisions).toHaveLength(4);
  }, 30_000);
});
