import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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
import type { PgeProcess } from '../support/processes.js';
import { storedEvents } from '../support/stored-events.js';

/**
 * `pge cancel` on a secured deployment, with real processes on a real nats-server: the client's
 * credential cancels a run whose work call hangs at the model (the HTTP request is aborted, the run
 * ends `cancelled` naming who and why); a generator's credential may not; a run that has ended,
 * or one the deployment never held, is refused; with no coordinator to drive the run, the command
 * says so within seconds.
 */

let d: TestDeployment;
let coordinator: PgeProcess;

beforeAll(async () => {
  d = await startDeployment();
  // Every work call hangs: a run stays in flight until it is cancelled.
  d.openai.script((body) => passingAnswer(body, schemaOf(body) === 'pge_work' ? 60_000 : 0));
  coordinator = await d.worker('coordinator', ['--worker-id', 'coord-a']);
  for (const role of ['planner', 'generator', 'evaluator'] as const) await d.worker(role);
  await d.worker('persistence', ['--working-dir', d.logs]);
}, 60_000);

afterAll(async () => {
  const { refusals } = await d.close();
  // The one refusal is the generator's attempt below.
  expect(refusals).toEqual([expect.stringMatching(/Publish.*pge\.runs\.cancel/)]);
}, 60_000);

const pge = (args: string[]) => pgeAsClient(d, args);

const works = () => d.openai.completions().filter((r) => schemaOf(r.body) === 'pge_work');

/** Submits a run and waits until its first work call hangs at the model. */
async function runInFlight(task: string): Promise<string> {
  const before = works().length;
  const runId = await submitRun(d.client, task);
  await until(
    () => works().length,
    (n) => n > before,
    'the work call in flight',
  );
  return runId;
}

describe('pge cancel', () => {
  it('cancels a run in flight with the client credential only, and refuses a run that has ended', async () => {
    const runId = await runInFlight('a task to cancel');
    const call = works().at(-1)!;

    // A generator may not cancel: the server refuses the publish, and the run goes on.
    const nc = await connect(d.nats.connectOptions('generator'));
    nc.publish(
      'pge.runs.cancel',
      JSON.stringify({ runId, by: 'gen', reason: null, ts: new Date().toISOString() }),
    );
    await nc.flush().catch(() => undefined);
    await nc.close().catch(() => undefined);
    await until(
      () => d.nats.refusals(),
      (r) => r.length === 1,
      'the server to refuse the generator',
    );
    expect((await storedEvents(d.client, `pge.run.${runId}.evt.run.>`)).map((e) => e.type)).toEqual([
      'run.started',
    ]);

    const cancelled = await pge(['cancel', runId, '--reason', 'wrong task', '--by', 'ana']);
    expect(cancelled.code, cancelled.stderr).toBe(0);
    expect(cancelled.stdout).toMatch(
      new RegExp(`^run ${runId}: cancelled by ana \\(coordinator .+\\); steps stopped in flight: 1\\n$`),
    );
    const events = await closedRun(d.client, runId, 10_000);
    const closing = events.at(-1) as RunEventOf<'run.failed'>;
    expect(closing.payload).toMatchObject({
      reason: 'cancelled',
      message: 'the run was cancelled by ana: wrong task',
      cancelled: { by: 'ana', reason: 'wrong task' },
      inFlight: [{ stepNumber: 1, attempt: 1, state: expect.stringMatching(/^executing\./) }],
    });
    expect(events.at(-2)).toMatchObject({ type: 'request.cancelled', payload: { phase: 'work' } });
    // The worker aborted the HTTP request to the model.
    await until(
      () => call.abortedAt,
      (at) => at !== null,
      'the model server to see the abort',
    );

    const again = await pge(['cancel', runId]);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain(`run ${runId} has ended (cancelled): there is nothing to cancel`);
    const unknown = await pge(['cancel', 'pge-no-such-run']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('the deployment holds no run pge-no-such-run');
  }, 90_000);

  it('says within seconds that no coordinator drives the run', async () => {
    const runId = await runInFlight('a task whose coordinator dies');
    await coordinator.stop('SIGKILL');
    const started = Date.now();
    const orphan = await pge(['cancel', runId]);
    expect(orphan.code).toBe(3);
    expect(orphan.stderr).toContain(`no coordinator drives run ${runId} now`);
    expect(Date.now() - started).toBeLessThan(15_000);
    // The run is not ended by it: a coordinator that takes it over can cancel it then.
    const types = (await storedEvents(d.client, `pge.run.${runId}.evt.run.>`)).map((e) => e.type);
    expect(types).toEqual(['run.started']);
  }, 60_000);
});
