import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunSummary } from '../../src/runtime/run-list.js';
import type { RunEventOf } from '../../src/schemas/index.js';
import {
  closedRun,
  passingAnswer,
  pgeAsClient,
  schemaOf,
  startDeployment,
  submitRun,
  type TestDeployment,
  until,
} from '../support/deployment.js';
import { startPge } from '../support/processes.js';
import { taskHas } from '../support/scripted-deployment.js';

/**
 * `pge runs` on a distributed deployment, with real processes on a real nats-server and the
 * `client` credential: a run that passed, one that failed on a model error, one waiting at its
 * plan's gate and one still working, each listed with its status, steps, cost and latest event as
 * its closing event (or its open events) say; `--status` and `--since` keep what they ask for.
 */

const FAILING = 'a task the model refuses';
const SLOW = 'a task whose work takes a while';

let d: TestDeployment;

beforeAll(async () => {
  d = await startDeployment();
  d.openai.script((body) => {
    if (taskHas(body, FAILING)) return { status: 400, error: { message: 'refused' } };
    return passingAnswer(body, taskHas(body, SLOW) && schemaOf(body) === 'pge_work' ? 3_000 : 0);
  });
  // Priced, so that a run's cost is more than 0.
  const price = ['--price', 'test-model=100,200'];
  await d.worker('coordinator');
  for (const role of ['planner', 'generator', 'evaluator'] as const) await d.worker(role, price);
}, 60_000);

afterAll(async () => {
  // Nothing the client did was refused: its credential may read what pge runs reads.
  const { refusals } = await d.close();
  expect(refusals).toEqual([]);
}, 60_000);

const pgeRuns = (args: string[]) => pgeAsClient(d, ['runs', ...args]);

async function listed(args: string[] = []): Promise<RunSummary[]> {
  const r = await pgeRuns([...args, '--json']);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as RunSummary[];
}

const submit = (task: string, options?: object) => submitRun(d.client, task, options);

describe('pge runs on NATS', () => {
  it('lists each run with its status, steps, cost and latest event; --status and --since filter', async () => {
    expect((await pgeRuns([])).stdout).toBe('no runs\n');
    const passed = await submit('a task that passes');
    const failed = await submit(FAILING);
    const [passedEvents, failedEvents] = await Promise.all([
      closedRun(d.client, passed),
      closedRun(d.client, failed),
    ]);
    const since = new Date().toISOString();
    await new Promise((resolve) => setTimeout(resolve, 20));
    const waiting = await submit('a gated task', { approve: ['plan'] });
    const slow = await submit(SLOW);

    const runs = await until(
      () => listed(),
      (r) =>
        r.find((x) => x.runId === waiting)?.status === 'waiting' &&
        r.find((x) => x.runId === slow)?.stepsTotal === 3 &&
        r.find((x) => x.runId === slow)?.status === 'running',
      'the gated run to wait and the slow one to have its plan',
    );
    expect(runs.map((r) => r.runId)).toEqual([passed, failed, waiting, slow]);
    const completed = passedEvents.at(-1) as RunEventOf<'run.completed'>;
    expect(runs[0]).toEqual({
      runId: passed,
      job: { id: passed, run: 1 },
      task: 'a task that passes',
      status: 'passed',
      stepsPassed: 3,
      stepsTotal: 3,
      costUsd: completed.payload.usage.costUsd,
      startedAt: passedEvents[0]!.ts,
      lastEventAt: completed.ts,
      lastEvent: 'run.completed',
    });
    expect(completed.payload.usage.costUsd).toBeGreaterThan(0);
    expect(failedEvents.at(-1)).toMatchObject({ type: 'run.failed', payload: { reason: 'error' } });
    expect(runs[1]).toMatchObject({
      status: 'failed',
      stepsPassed: 0,
      stepsTotal: null,
      lastEvent: 'run.failed',
    });
    expect(runs[2]).toMatchObject({
      status: 'waiting',
      stepsPassed: 0,
      stepsTotal: 3,
      lastEvent: 'approval.requested',
    });
    expect(runs[2]!.costUsd).toBeGreaterThan(0);
    expect(runs[3]).toMatchObject({ task: SLOW, status: 'running', stepsTotal: 3 });

    expect((await listed(['--status', 'waiting,failed'])).map((r) => r.runId)).toEqual([failed, waiting]);
    expect((await listed(['--since', since])).map((r) => r.runId)).toEqual([waiting, slow]);

    // The table: a heading, then a line a run, its id first.
    const table = await pgeRuns(['--status', 'failed,waiting']);
    expect(table.code, table.stderr).toBe(0);
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^RUN +JOB +STATUS +STEPS +COST +STARTED \(UTC\) +LAST EVENT +TASK$/);
    // Each is the first run of a job of its own: no job is shown.
    expect(lines.slice(1).map((l) => l.split(/ +/).slice(0, 4))).toEqual([
      [failed, '-', 'failed', '0/?'],
      [waiting, '-', 'waiting', '0/3'],
    ]);

    // The slow run ends, and shows so.
    await closedRun(d.client, slow, 30_000);
    const all = await listed();
    expect(all.map((r) => [r.runId, r.status])).toEqual([
      [passed, 'passed'],
      [failed, 'failed'],
      [waiting, 'waiting'],
      [slow, 'passed'],
    ]);
    expect((await listed(['--status', 'passed', '--since', '1h'])).map((r) => r.runId)).toEqual([
      passed,
      slow,
    ]);
    expect(await listed(['--status', 'passed', '--since', '2000-01-01T00:00:00Z'])).toEqual(
      all.filter((r) => r.status === 'passed'),
    );
    // The observer's credential (the dashboard's) lists them too.
    const observer = startPge(['runs', '--json', '--nats', d.nats.url, '--creds', d.nats.creds.observer], {});
    expect(await observer.exited(), observer.stderr()).toBe(0);
    expect(JSON.parse(observer.stdout())).toEqual(all);
  }, 90_000);
});
