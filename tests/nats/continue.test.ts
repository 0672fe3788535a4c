import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsRole } from '../../src/bus/permissions.js';
import { inputOf } from '../../src/roles/prompts.js';
import type { RunSummary } from '../../src/runtime/run-list.js';
import { stepsAskedSince, THREE_PART_PLAN } from '../support/continue-fixtures.js';
import { type FakeOpenAI, startFakeOpenAI } from '../support/fake-openai-server.js';
import { type SecuredNatsServer, startSecuredNatsServer } from '../support/nats-server.js';
import { type PgeProcess, startPge } from '../support/processes.js';
import { answers, schemaOf, scriptedStep, startWorkers } from '../support/scripted-deployment.js';

/**
 * `pge continue --nats <url> <runId>` on a deployment of real `pge worker` processes on a private,
 * secured nats-server, with the client credential: the earlier run is read from the stream, only
 * its failed step and the step that depends on it are asked again, and `pge runs` shows the job.
 */

const MODEL = { OPENAI_API_KEY: 'sk-test-continue', PGE_MODEL: 'test-model' };

let nats: SecuredNatsServer;
let openai: FakeOpenAI;
let logs: string;
let here: string;
let workers: PgeProcess[] = [];
/** Step numbers whose evaluations score 5, below the thresholds. */
let failing = new Set<number>([2]);

beforeAll(async () => {
  nats = await startSecuredNatsServer();
  openai = await startFakeOpenAI();
  openai.script((body) => {
    const schema = schemaOf(body) ?? '';
    const { stepNumber } = inputOf(body.messages) as { stepNumber?: number };
    const score = stepNumber !== undefined && failing.has(stepNumber) ? 5 : 9;
    return scriptedStep(answers(score, 3)[schema], 5);
  });
  logs = mkdtempSync(join(tmpdir(), 'pge-continue-logs-'));
  here = mkdtempSync(join(tmpdir(), 'pge-continue-client-'));
  writeFileSync(join(here, 'plan.json'), JSON.stringify(THREE_PART_PLAN));
  const env = (role: NatsRole) => ({ ...nats.env(role), ...MODEL, OPENAI_BASE_URL: openai.url });
  workers = await startWorkers(env, logs);
}, 60_000);

afterAll(async () => {
  await Promise.all(workers.map((p) => p.stop('SIGKILL')));
  await openai?.close();
  await nats?.stop();
  rmSync(logs, { recursive: true, force: true });
  rmSync(here, { recursive: true, force: true });
}, 60_000);

/** `pge <args> --nats <url> --creds client.creds`, run to its end in the client's directory. */
async function client(...args: string[]): Promise<PgeProcess> {
  const p = startPge([...args, '--nats', nats.url, '--creds', nats.creds.client], {}, here);
  await p.exited();
  return p;
}

describe('pge continue --nats', () => {
  it('reads the earlier run from the stream and runs only its failed step and its dependent', async () => {
    const first = await client(
      'run',
      '--plan',
      'plan.json',
      '--max-retries',
      '0',
      '--parallel',
      '1',
      '--json',
    );
    expect(first.child.exitCode, first.stderr()).toBe(1);
    const earlier = JSON.parse(first.stdout());
    expect(earlier.totalStepsCompleted).toBe(2);

    failing = new Set();
    const since = openai.completions().length;
    const next = await client('continue', earlier.runId, '--max-retries', '0', '--json');
    expect(next.child.exitCode, next.stderr()).toBe(0);
    expect(next.stderr()).toContain(
      `run 2 of job ${earlier.runId}, continuing run ${earlier.runId}: kept s1; runs s2, s3`,
    );
    // No planner, no s1: only the second and third steps are asked about.
    expect(stepsAskedSince(openai, since)).toEqual([2, 3]);
    const result = JSON.parse(next.stdout());
    expect(result.passed).toBe(true);
    expect(
      result.stepLogs.map((s: { stepId: string; keptFrom: string | null }) => [s.stepId, s.keptFrom]),
    ).toEqual([
      ['s1', earlier.runId],
      ['s2', null],
      ['s3', null],
    ]);

    const listed = await client('runs', '--json');
    expect(listed.child.exitCode, listed.stderr()).toBe(0);
    const runs = JSON.parse(listed.stdout()) as RunSummary[];
    expect(runs.map((r) => [r.runId, r.job, `${r.stepsPassed}/${r.stepsTotal}`])).toEqual([
      [earlier.runId, { id: earlier.runId, run: 1 }, '2/3'],
      [result.runId, { id: earlier.runId, run: 2 }, '3/3'],
    ]);

    // An unknown run id is said to be unknown, and nothing is submitted.
    const unknown = await client('continue', 'pge-no-such-run');
    expect(unknown.child.exitCode).toBe(2);
    expect(unknown.stderr()).toContain("no run pge-no-such-run in the deployment's events stream");
  }, 90_000);
});
