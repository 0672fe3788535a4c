import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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
import type { PgeProcess } from '../support/processes.js';
import { storedEvents } from '../support/stored-events.js';

/**
 * Approval gates on a distributed deployment, with real processes on a real nats-server: a run
 * submitted with `approve: ["plan"]` waits at its plan, listed by `pge approvals`, until
 * `pge approve` decides (with the client's credential); a rejection reaches the planner with its
 * reason, and the waiting run survives its coordinator's death.
 */

let d: TestDeployment;
const coordinators: PgeProcess[] = [];

beforeAll(async () => {
  d = await startDeployment();
  d.openai.script((body) => passingAnswer(body, 0));
  for (const id of ['coord-a', 'coord-b'])
    coordinators.push(await d.worker('coordinator', ['--worker-id', id]));
  for (const role of ['planner', 'generator', 'evaluator'] as const) await d.worker(role);
  await d.worker('persistence', ['--working-dir', d.logs]);
}, 60_000);

afterAll(async () => {
  const { refusals } = await d.close();
  expect(refusals).toEqual([]);
}, 60_000);

const pge = (args: string[]) => pgeAsClient(d, args);
const submitWithGate = (task: string) => submitRun(d.client, task, { approve: ['plan'] });

const plans = () => d.openai.completions().filter((r) => schemaOf(r.body) === 'pge_plan');

describe('approval gates on NATS', () => {
  it('holds a run at its plan until pge approve; a rejection goes back to the planner; the wait survives its coordinator', async () => {
    const runId = await submitWithGate('a gated task');
    const waiting = await until(
      () => pge(['approvals', '--json']),
      (r) => r.code === 0 && r.stdout.includes(runId),
      'pge approvals to list the run',
    );
    expect(JSON.parse(waiting.stdout)).toEqual([
      expect.objectContaining({ runId, gate: 'plan', stepNumber: null }),
    ]);

    // Rejected: the planner is asked again, told why.
    const rejected = await pge(['approve', runId, '--reject', 'add a step on safety', '--by', 'ana']);
    expect(rejected.code, rejected.stderr).toBe(0);
    expect(rejected.stdout).toBe(`run ${runId}: plan rejected by ana\n`);
    await until(
      () => plans().length,
      (n) => n === 2,
      'the planner asked again',
    );
    expect(JSON.stringify(plans()[1]!.body)).toContain('add a step on safety');
    await until(
      () => pge(['approvals', '--json']),
      (r) => r.code === 0 && r.stdout.includes(runId),
      'the revised plan to wait at its gate',
    );
    // No step has started while the plan waited.
    let events = await storedEvents(d.client, `pge.run.${runId}.evt.>`);
    expect(events.some((e) => e.type === 'step.started')).toBe(false);

    // The coordinator driving the run dies while it waits; the other takes the run over, waiting still.
    const owner = coordinators.find((c) => c.stderr().includes(runId))!;
    await owner.stop('SIGKILL');
    events = await until(
      () => storedEvents(d.client, `pge.run.${runId}.evt.>`),
      (e) => e.some((x) => x.type === 'run.resumed'),
      'the run taken over',
      20_000,
    );
    expect(events.some((e) => e.type === 'step.started')).toBe(false);

    const approved = await pge(['approve', runId, '--gate', 'plan', '--by', 'ana']);
    expect(approved.code, approved.stderr).toBe(0);
    const closed = await closedRun(d.client, runId, 30_000);
    expect(closed.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true } });
    const decisions = closed.flatMap((e) =>
      e.type === 'approval.decided' ? [[e.payload.decision, e.payload.by]] : [],
    );
    expect(decisions).toEqual([
      ['reject', 'ana'],
      ['approve', 'ana'],
    ]);
    const t = closed.map((e) => e.type);
    expect(t.lastIndexOf('approval.decided')).toBeLessThan(t.indexOf('step.started'));
    expect((await pge(['approvals'])).stdout).toBe('no run waits at a gate\n');
    const none = await pge(['approve', runId]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain(`run ${runId} waits at no gate`);
  }, 90_000);
});
