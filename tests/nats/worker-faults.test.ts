import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { NatsRole } from '../../src/bus/permissions.js';
import { SUBMIT_ANSWER_MS } from '../../src/bus/subjects.js';
import { readRunToEnd } from '../support/deployment.js';
import { type FakeOpenAI, type FakeStep, startFakeOpenAI } from '../support/fake-openai-server.js';
import { type SecuredNatsServer, startSecuredNatsServer } from '../support/nats-server.js';
import { type PgeProcess, startPge } from '../support/processes.js';

/**
 * A generator killed with SIGKILL in the middle of a model call, with the NatsBus defaults (no
 * timing option set): the work item goes to another generator within seconds, not after a minute,
 * even while a subscriber to `>` keeps the dead worker's pull requests answerable, and the run
 * completes with a gap-free event stream. The server is started from `pge nats-config`; each
 * process connects with its role's credential.
 */

const ANSWERS: Record<string, object> = {
  pge_plan: {
    scope: 'one step',
    steps: [{ id: 's1', title: 'Step 1', description: 'do it', expectedOutput: 'out', dependsOn: [] }],
    criteria: [{ name: 'accuracy', weight: 'high', description: 'right', threshold: 7 }],
  },
  pge_contract: { title: 'c', acceptanceCriteria: ['a'], expectedOutput: 'o', verificationMethod: 'v' },
  pge_contract_review: { status: 'approved', amendments: [], rationale: 'ok' },
  pge_work: { output: 'the work', notes: 'n', selfAssessment: [] },
  pge_evaluation: {
    scores: [{ criterion: 'accuracy', score: 9, evidence: 'e' }],
    findings: [],
    actionableFeedback: [],
    summary: 's',
  },
};

let nats: SecuredNatsServer;
let openai: FakeOpenAI;
let logs: string;
let models: Record<string, string>;
const processes: PgeProcess[] = [];

beforeEach(async () => {
  nats = await startSecuredNatsServer();
  openai = await startFakeOpenAI();
  logs = mkdtempSync(join(tmpdir(), 'pge-faults-'));
  models = {
    OPENAI_BASE_URL: openai.url,
    OPENAI_API_KEY: 'sk-test-faults',
    PGE_MODEL: 'test-model',
  };
});

afterEach(async () => {
  await Promise.all(processes.splice(0).map((p) => p.stop('SIGKILL')));
  await openai.close();
  await nats.stop();
  rmSync(logs, { recursive: true, force: true });
  // Every process did its job within its credential.
  expect(nats.refusals()).toEqual([]);
});

function start(role: NatsRole, ...extra: string[]): PgeProcess {
  const process = startPge(['worker', '--role', role, ...extra], { ...nats.env(role), ...models });
  processes.push(process);
  return process;
}

const workRequests = () =>
  openai.completions().filter((r) => r.body?.response_format?.json_schema?.name === 'pge_work');

async function until(check: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const started = Date.now();
  while (!check()) {
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('a generator killed mid-call', () => {
  it('has its work item handed to another generator within seconds, and the run completes', async () => {
    // biome-ignore lint/suspicious/noExplicitAny: the request body as the SDK sent it.
    openai.script((body: any): FakeStep => {
      const name = body?.response_format?.json_schema?.name;
      // The first work call hangs, so that its generator dies holding it.
      const delayMs = name === 'pge_work' && workRequests().length === 1 ? 120_000 : 0;
      return { content: ANSWERS[name]!, delayMs };
    });
    const ready = [start('coordinator'), start('persistence', '--working-dir', logs)];
    ready.push(start('planner'), start('evaluator'));
    const doomed = start('generator', '--worker-id', 'gen-doomed');
    await Promise.all([...ready, doomed].map((p) => p.waitFor(/ready/)));

    const nc = await connect(nats.connectOptions('client'));
    // A listener to everything (an operator's `nats sub '>'`: the test's admin credential, as no
    // role may): the server can then still deliver to the reply subject of a dead worker's pull request.
    const listener = await connect(nats.connectOptions('admin'));
    const everything = listener.subscribe('>');
    try {
      const reply = await nc.request('pge.runs.submit', JSON.stringify({ task: 'survive a kill' }), {
        timeout: SUBMIT_ANSWER_MS,
      });
      const { runId } = reply.json<{ runId: string }>();
      await until(() => workRequests().length === 1, 'the first work call');
      await doomed.stop('SIGKILL');
      const killedAt = Date.now();
      const survivor = start('generator', '--worker-id', 'gen-survivor');
      await survivor.waitFor(/ready/);

      await until(() => workRequests().length === 2, 'the work item to be handed on', 25_000);
      const handedOnMs = workRequests()[1]!.receivedAt - killedAt;
      // Ack wait 10 s (the last heartbeat of the dead worker may be up to a third of it older).
      expect(handedOnMs).toBeLessThan(12_000);

      const events = await readRunToEnd(nc, runId);
      expect(events.at(-1)?.type).toBe('run.completed');
      expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
      // The one repeated call is the one in flight at the kill.
      expect(workRequests()).toHaveLength(2);
      const served = events.filter((e) => e.type === 'model.call.completed' && e.payload.phase === 'work');
      expect(served.map((e) => (e.type === 'model.call.completed' ? e.payload.worker : ''))).toEqual([
        'gen-survivor',
      ]);
    } finally {
      everything.unsubscribe();
      await listener.close();
      await nc.close();
    }
  }, 60_000);
});
