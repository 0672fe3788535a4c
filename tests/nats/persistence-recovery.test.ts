import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readLogFile } from '../../src/persistence/index.js';
import type { RunEvent } from '../../src/schemas/index.js';
import {
  closed,
  closedRun,
  passingAnswer,
  startDeployment,
  submitRun,
  type TestDeployment,
  until,
} from '../support/deployment.js';
import type { PgeProcess } from '../support/processes.js';
import { storedEvents } from '../support/stored-events.js';

/**
 * The persistence worker under faults, with real processes on a real nats-server: killed mid-run
 * and replaced, and fed events it cannot place. Whatever happens, a run's log ends equal to the
 * run's event stream, and the next run gets its log.
 */

let d: TestDeployment;
let persistence: PgeProcess;

beforeAll(async () => {
  d = await startDeployment();
  // Slow enough calls that a run lasts a few seconds: long enough to kill persistence in the middle.
  d.openai.script((body) => passingAnswer(body, 150));
  for (const role of ['coordinator', 'planner', 'evaluator', 'generator'] as const) await d.worker(role);
  persistence = await d.worker('persistence', ['--working-dir', d.logs]);
}, 60_000);

afterAll(async () => {
  const { codes, refusals } = await d.close();
  // The processes still running drained and exited cleanly on SIGTERM (the killed one is long gone).
  expect(codes.filter((code) => code !== null)).toEqual(codes.filter((code) => code !== null).map(() => 0));
  // Each did its job within its credential.
  expect(refusals).toEqual([]);
}, 60_000);

const logOf = (runId: string) => join(d.logs, `pge_shared_state_${runId}.md`);

/** The events of the run's log so far ([] before it exists). */
async function logged(runId: string): Promise<RunEvent[]> {
  return existsSync(logOf(runId)) ? readLogFile(logOf(runId)) : [];
}

/** Waits until the run's log holds exactly `events`, then checks it. */
async function expectLogged(events: readonly RunEvent[]): Promise<void> {
  const runId = events[0]!.runId;
  const log = await until(
    () => logged(runId).catch((error: Error) => error.message),
    (l) => Array.isArray(l) && l.length >= events.length,
    `the log of ${runId}`,
  );
  expect(log).toEqual(events);
}

/**
 * A `step.started` of run `runId` with seq `seq`, valid against its schema, published with plain
 * nats.js (JetStream stores it; persistence reads it); resolves with the report that names its
 * subject on pge.errors.rejected.persistence, as a client hears it. Only a coordinator may publish events: the
 * stray is the test's fault injection, a coordinator gone wrong, published with its admin credential.
 */
async function publishStray(runId: string, seq: number): Promise<{ subject: string; problem: string }> {
  const subject = `pge.run.${runId}.evt.step.started`;
  const event = {
    id: `${runId}-stray-${seq}`,
    runId,
    seq,
    ts: new Date().toISOString(),
    type: 'step.started',
    payload: { stepId: 's9', stepNumber: 9, title: 'a step nobody runs' },
  };
  const nc = await connect(d.client);
  const injector = await connect(d.nats.connectOptions('admin'));
  try {
    const seen: { subject: string; problem: string }[] = [];
    const reporters = new Map<object, string>();
    nc.subscribe('pge.errors.rejected.*', {
      callback: (_error, msg) => {
        const report = msg.json<{ subject: string; problem: string }>();
        reporters.set(report, msg.subject);
        seen.push(report);
      },
    });
    await nc.flush();
    await jetstream(injector).publish(subject, JSON.stringify(event));
    const rejections = await until(
      () => seen.filter((r) => r.subject === subject),
      (found) => found.length > 0,
      `the rejection of ${subject}`,
    );
    expect(reporters.get(rejections[0]!)).toBe('pge.errors.rejected.persistence');
    return rejections[0]!;
  } finally {
    await injector.close();
    await nc.close();
  }
}

describe('the persistence worker', () => {
  it('killed mid-run (SIGKILL) and replaced: the new one writes the whole log, and the next run gets its log', async () => {
    const runId = await submitRun(d.client, 'a run that loses its persistence worker');
    const before = await until(
      () => logged(runId).catch(() => []),
      (l) => l.length >= 5,
      'a partial log',
    );
    persistence.child.kill('SIGKILL');
    await persistence.exited();
    // The run goes on without persistence: these events reach the stream, and no log.
    const meanwhile = await until(
      () => storedEvents(d.client, `pge.run.${runId}.evt.>`),
      (s) => s.length >= before.length + 8 || closed(s),
      'events published while persistence was down',
    );
    const partial = await logged(runId).catch(() => []);
    expect(closed(partial)).toBe(false);
    expect(partial.length).toBeLessThan(meanwhile.length);
    persistence = await d.worker('persistence', ['--working-dir', d.logs]);
    const events = await closedRun(d.client, runId);
    expect(events.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true } });
    await expectLogged(events);

    const next = await closedRun(d.client, await submitRun(d.client, 'the next run'));
    await expectLogged(next);
    // Nothing was refused or failed on the way.
    expect(persistence.stderr()).not.toMatch(/rejected|failed/);
  }, 60_000);

  it('reports an orphan event on pge.errors.rejected and goes on: the next run is fully logged', async () => {
    const orphanRun = `orphan-${Date.now()}`;
    const rejection = await publishStray(orphanRun, 2);
    expect(rejection.problem).toBe(
      `step.started (seq 2) of run ${orphanRun} cannot be placed: the run has no run.started (no run of that id was started)`,
    );
    expect(existsSync(logOf(orphanRun))).toBe(false);

    const events = await closedRun(d.client, await submitRun(d.client, 'a run after the orphan'));
    await expectLogged(events);
    // Nothing is left unacknowledged on the persistence consumer (the test's inspection, with its
    // admin credential: no role but persistence may look at that consumer).
    const nc = await connect(d.nats.connectOptions('admin'));
    try {
      const jsm = await jetstreamManager(nc);
      const info = await until(
        () => jsm.consumers.info('PGE_EVENTS', 'pge-persistence'),
        (i) => i.num_ack_pending === 0 && i.num_pending === 0,
        'the persistence consumer to be idle',
      );
      expect(info.num_ack_pending).toBe(0);
    } finally {
      await nc.close();
    }
  }, 60_000);

  it('reports an event published after a run closed, and keeps the log ending with the closing event', async () => {
    const events = await closedRun(d.client, await submitRun(d.client, 'a run someone writes after'));
    await expectLogged(events);
    const closing = events.at(-1)!;
    const rejection = await publishStray(closing.runId, closing.seq + 1);
    expect(rejection.problem).toBe(
      `step.started (seq ${closing.seq + 1}) of run ${closing.runId} came after its closing event (seq ${closing.seq})`,
    );
    expect(await logged(closing.runId)).toEqual(events);
  }, 60_000);
});
