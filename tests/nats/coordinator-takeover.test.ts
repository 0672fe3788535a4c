import { Kvm } from '@nats-io/kv';
import { connect } from '@nats-io/transport-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LEASE_BUCKET } from '../../src/bus/run-leases.js';
import {
  closedRun,
  loggedRun,
  passingAnswer,
  schemaOf,
  startDeployment,
  submitRun,
  type TestDeployment,
  until,
} from '../support/deployment.js';
import { type PgeProcess, startPge } from '../support/processes.js';
import { storedEvents } from '../support/stored-events.js';

/**
 * A coordinator SIGKILLed in the middle of a run, with a second coordinator running: the second
 * takes the run over within seconds (its lease expires), rebuilds it from PGE_EVENTS, applies the
 * result the generator stored after the owner died without asking any model again, records
 * `run.resumed` with itself as owner, and finishes the run; stream and log agree, gap-free.
 */

let deployment: TestDeployment;
beforeEach(async () => {
  deployment = await startDeployment();
  // The first work call takes 3 s: the owner dies while it runs, and its answer comes after.
  deployment.openai.script((body) =>
    passingAnswer(body, schemaOf(body) === 'pge_work' && workCalls().length === 1 ? 3_000 : 20),
  );
});
afterEach(async () => {
  const { refusals } = await deployment.close();
  // Every process did its job within its credential.
  expect(refusals).toEqual([]);
});

const workCalls = () => deployment.openai.completions().filter((r) => schemaOf(r.body) === 'pge_work');

/** Starts the role workers, submits a run, and returns its id once its first work call is in flight. */
async function submitDuringWork(task: string): Promise<string> {
  for (const role of ['planner', 'generator', 'evaluator'] as const) await deployment.worker(role);
  const runId = await submitRun(deployment.client, task);
  await until(
    () => workCalls().length,
    (n) => n === 1,
    'the first work call',
  );
  return runId;
}

describe('a coordinator killed mid-run', () => {
  it('has its run taken over by another coordinator, with at most the call in flight repeated', async () => {
    const coordinators: Record<string, PgeProcess> = {
      'coord-a': await deployment.worker('coordinator', ['--worker-id', 'coord-a']),
      'coord-b': await deployment.worker('coordinator', ['--worker-id', 'coord-b']),
    };
    await deployment.worker('persistence', ['--working-dir', deployment.logs]);

    const client = deployment.client;
    const runId = await submitDuringWork('survive the coordinator');
    const owner = Object.keys(coordinators).find((id) => coordinators[id]!.stderr().includes(runId))!;
    const heir = owner === 'coord-a' ? 'coord-b' : 'coord-a';
    const before = await storedEvents(client, `pge.run.${runId}.evt.>`);
    await coordinators[owner]!.stop('SIGKILL');
    const killedAt = Date.now();

    const resumed = await until(
      () => storedEvents(client, `pge.run.${runId}.evt.>`),
      (events) => events.some((e) => e.type === 'run.resumed'),
      'run.resumed',
    );
    const takeoverMs = Date.now() - killedAt;
    expect(takeoverMs).toBeLessThan(8_000);
    const resume = resumed.find((e) => e.type === 'run.resumed')!;
    expect(resume.payload).toMatchObject({ owner: heir, fromSeq: expect.any(Number) });
    expect(coordinators[heir]!.stderr()).toContain(`took over run ${runId} from ${owner}`);

    const events = await closedRun(client, runId, 30_000);
    expect(events.at(-1)?.type).toBe('run.completed');
    // Gap-free and in order, the dead owner's events kept as they were.
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(events.slice(0, before.length)).toEqual(before);
    // The work call in flight at the kill was answered after it: its stored result was applied.
    expect(workCalls()).toHaveLength(3);
    const calls = events.filter((e) => e.type === 'model.call.completed');
    expect(calls).toHaveLength(deployment.openai.completions().length);

    // The log, written by the persistence worker, is the stream.
    expect(await loggedRun(deployment.logs, runId, events.length)).toEqual(events);
  }, 90_000);

  it('the only coordinator, killed and started again under the same id, takes its own run back', async () => {
    const first = await deployment.worker('coordinator', ['--worker-id', 'coord-a']);
    const client = deployment.client;
    const runId = await submitDuringWork('survive a restart');
    await first.stop('SIGKILL');
    // As the issue found it: a new coordinator ready 2 s later.
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    const second = await deployment.worker('coordinator', ['--worker-id', 'coord-a']);
    const events = await closedRun(client, runId, 30_000);
    expect(events.at(-1)?.type).toBe('run.completed');
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(events.find((e) => e.type === 'run.resumed')?.payload).toMatchObject({ owner: 'coord-a' });
    expect(second.stderr()).toContain(`took over run ${runId}`);
    expect(workCalls().length).toBeLessThanOrEqual(4);
  }, 90_000);

  it('pge resume --nats takes over a run whose lease was lost, follows it to its end, and refuses an ended run', async () => {
    const first = await deployment.worker('coordinator', ['--worker-id', 'coord-a']);
    const client = deployment.client;
    const runId = await submitDuringWork('resume on demand');
    await first.stop('SIGKILL');
    // The lease is lost (an operator purged it): no coordinator will take the run over by itself.
    // The test's own doing, with its admin credential: no role but a coordinator may touch the bucket.
    const nc = await connect(deployment.nats.connectOptions('admin'));
    try {
      await (await new Kvm(nc).open(LEASE_BUCKET)).purge(runId);
    } finally {
      await nc.close();
    }
    const second = await deployment.worker('coordinator', ['--worker-id', 'coord-b']);
    await new Promise((resolve) => setTimeout(resolve, 4_000));
    expect((await storedEvents(client, `pge.run.${runId}.evt.>`)).some((e) => e.type === 'run.resumed')).toBe(
      false,
    );

    const { url, creds } = deployment.nats;
    const resume = startPge(['resume', '--nats', url, '--creds', creds.client, runId], {});
    expect(await resume.exited(), resume.stderr()).toBe(0);
    expect(resume.stderr()).toContain(`run ${runId} taken over by coordinator coord-b`);
    // Its result is rebuilt from events that hold the takeover, and printed as pge run prints one.
    expect(resume.stderr()).not.toContain('cannot rebuild');
    expect(resume.stdout()).toMatch(/\n\nPGE Harness completed: \d+\/\d+ steps passed/);
    expect(second.stderr()).not.toContain('cannot');
    const events = await storedEvents(client, `pge.run.${runId}.evt.>`);
    expect(events.at(-1)?.type).toBe('run.completed');
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(events.find((e) => e.type === 'run.resumed')?.payload).toMatchObject({ owner: 'coord-b' });

    const again = startPge(['resume', '--nats', url, '--creds', creds.client, runId], {});
    expect(await again.exited()).toBe(2);
    expect(again.stderr()).toMatch(new RegExp(`run ${runId} has ended \\(run.completed\\)`));
  }, 90_000);
});
