import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsRole } from '../../src/bus/permissions.js';
import { inputOf } from '../../src/roles/prompts.js';
import type { RunSummary } from '../../src/runtime/run-list.js';
import { stepsAskedSince, THREE_PART_PLAN } from '../support/continue-fixtures.js';
import { type FakeOpenAI, startFakeOpenAI } from '../support/fake-openai-server.js';
import { type SecuredNatsServer, startSecuredNatsServer } from '../support/nats-server.js';
import { type PgeProcess, ROOT, startPge, startWorkersAtOnce } from '../support/processes.js';
import {
  answers,
  asksForTools,
  schemaOf,
  scriptedStep,
  toolAnswers,
} from '../support/scripted-deployment.js';

/**
 * `pge continue --nats <url> <runId>` on a deployment of real `pge worker` processes on a private,
 * secured nats-server, with the client credential: the earlier run is read from the stream, only
 * its failed step and the step that depends on it are asked again, the kept step's file is in the
 * workspace the generator of the new run works in, and `pge runs` shows the job. The generator
 * and the evaluator keep workspaces under their own --working-dir, not under the coordinator's
 * directory: the coordinator is told where (--workspaces). A run still going, and an unknown run
 * id, are refused at once.
 */

const MODEL = { OPENAI_API_KEY: 'sk-test-continue', PGE_MODEL: 'test-model' };

let nats: SecuredNatsServer;
let openai: FakeOpenAI;
let logs: string;
let here: string;
/** The working directory of the generator and the evaluator: their workspaces are under it. */
let acting: string;
let workers: PgeProcess[] = [];
/** Step numbers whose evaluations score 5, below the thresholds. */
let failing = new Set<number>([2]);

beforeAll(async () => {
  nats = await startSecuredNatsServer();
  openai = await startFakeOpenAI();
  openai.script((body) => {
    const schema = schemaOf(body) ?? '';
    const { stepNumber } = inputOf(body.messages) as { stepNumber?: number };
    // Each step's first work writes a file in the run's workspace, then answers.
    if (schema === 'pge_work' && toolAnswers(body).length === 0 && body.tools)
      return asksForTools([
        { name: 'write_file', arguments: { path: `step-${stepNumber}.md`, content: 'x' } },
      ]);
    const score = stepNumber !== undefined && failing.has(stepNumber) ? 5 : 9;
    return scriptedStep(answers(score, 3)[schema], 5);
  });
  logs = mkdtempSync(join(tmpdir(), 'pge-continue-logs-'));
  here = mkdtempSync(join(tmpdir(), 'pge-continue-client-'));
  acting = mkdtempSync(join(tmpdir(), 'pge-continue-acting-'));
  writeFileSync(join(here, 'plan.json'), JSON.stringify(THREE_PART_PLAN));
  const env = (role: NatsRole) => ({ ...nats.env(role), ...MODEL, OPENAI_BASE_URL: openai.url });
  // Every worker runs in the repository's root; the coordinator is told where the generators' workspaces are.
  workers = await startWorkersAtOnce(
    [
      ['coordinator', ['--workspaces', join(acting, 'workspaces')]],
      ['persistence', ['--working-dir', logs]],
      ['planner', ['--concurrency', '8']],
      ['evaluator', ['--concurrency', '8', '--working-dir', acting]],
      ['generator', ['--concurrency', '8', '--working-dir', acting]],
    ],
    env,
    workers,
  );
}, 60_000);

afterAll(async () => {
  await Promise.all(workers.map((p) => p.stop('SIGKILL')));
  await openai?.close();
  await nats?.stop();
  rmSync(logs, { recursive: true, force: true });
  rmSync(here, { recursive: true, force: true });
  rmSync(acting, { recursive: true, force: true });
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

    // The kept step's file was copied where the generator of the new run works, not under the
    // coordinator's own directory (the repository's root).
    const workspace = join(acting, 'workspaces', result.runId);
    expect(existsSync(join(workspace, 'step-1.md'))).toBe(true);
    expect(existsSync(join(workspace, 'step-3.md'))).toBe(true);
    expect(existsSync(join(ROOT, 'workspaces', result.runId))).toBe(false);

    // A run still going: at the plan's gate, waiting for a person.
    const gated = startPge(
      ['run', 'a gated task', '--approve', 'plan', '--nats', nats.url, '--creds', nats.creds.client],
      {},
      here,
    );
    let waiting: RunSummary[] = [];
    const deadline = Date.now() + 20_000;
    while (waiting.length === 0 && Date.now() < deadline) {
      const r = await client('runs', '--status', 'waiting', '--json');
      waiting = JSON.parse(r.stdout() || '[]') as RunSummary[];
    }
    expect(waiting).toHaveLength(1);
    const open = waiting[0]!.runId;

    // The job's runs, not the other run's; every run without --job.
    const listed = await client('runs', '--job', earlier.runId, '--json');
    expect(listed.child.exitCode, listed.stderr()).toBe(0);
    const runs = JSON.parse(listed.stdout()) as RunSummary[];
    expect(runs.map((r) => [r.runId, r.job, `${r.stepsPassed}/${r.stepsTotal}`])).toEqual([
      [earlier.runId, { id: earlier.runId, run: 1 }, '2/3'],
      [result.runId, { id: earlier.runId, run: 2 }, '3/3'],
    ]);
    const all = JSON.parse((await client('runs', '--json')).stdout()) as RunSummary[];
    expect(all.map((r) => r.runId)).toEqual([earlier.runId, result.runId, open]);

    // Refused at once, from its run-level events, with nothing submitted: a run still going, and
    // a run id the stream does not hold (following either would wait out the 10 s idle timeout).
    const asked = openai.completions().length;
    for (const [id, said] of [
      [open, `pge: run ${open} has not ended (its latest run event is run.started at `],
      ['pge-no-such-run', "pge: no run pge-no-such-run in the deployment's events stream"],
    ] as const) {
      const started = Date.now();
      const refused = await client('continue', id);
      const tookMs = Date.now() - started;
      expect(refused.child.exitCode, refused.stderr()).toBe(2);
      expect(refused.stderr().split('\n')[0]).toContain(said);
      expect(tookMs).toBeLessThan(6_000);
    }
    expect(openai.completions()).toHaveLength(asked);
    await gated.stop('SIGKILL');
  }, 120_000);
});
