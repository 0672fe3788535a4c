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
  storedEvents,
  submitRun,
  type TestDeployment,
  until,
} from '../support/deployment.js';
import type { PgeProcess } from '../support/processes.js';

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
  for (const role of ['coordinator', 'planner', 'evaluator', 'generator']) await d.worker(role);
  persistence = await d.worker('persistence', ['--working-dir', d.logs]);
}, 60_000);

afterAll(async () => {
  const codes = await d?.close();
  // The processes still running drained and exited cleanly on SIGTERM (the killed one is long gone).
  expect(codes?.filter((code) => code !== null)).toEqual(codes?.filter((code) => code !== null).map(() => 0));
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

/** Collects what arrives on pge.errors.rejected while `during` runs, until `enough` says so. */
async function rejectionsWhile(
  during: () => Promise<void>,
  enough: (problems: { subject: string; problem: string }[]) => boolean,
): Promise<{ subject: string; problem: string }[]> {
  const nc = await connect({ servers: d.nats.url });
  try {
    const seen: { subject: string; problem: string }[] = [];
    const sub = nc.subscribe('pge.errors.rejected', {
      callback: (_error, msg) => void seen.push(msg.json()),
    });
    await nc.flush();
    await during();
    await until(
      () => seen,
      (s) => enough(s),
      'the rejection',
    );
    sub.unsubscribe();
    return seen;
  } finally {
    await nc.close();
  }
}

describe('the persistence worker', () => {
  it('killed mid-run (SIGKILL) and replaced: the new one writes the whole log, and the next run gets its log', async () => {
    const runId = await submitRun(d.nats.url, 'a run that loses its persistence worker');
    const before = await until(
      () => logged(runId).catch(() => []),
      (l) => l.length >= 5,
      'a partial log',
    );
    persistence.child.kill('SIGKILL');
    await persistence.exited();
    // The run goes on without persistence: these events reach the stream, and no log.
    const meanwhile = await until(
      () => storedEvents(d.nats.url, runId),
      (s) => s.length >= before.length + 8 || closed(s),
      'events published while persistence was down',
    );
    const partial = await logged(runId).catch(() => []);
    expect(closed(partial)).toBe(false);
    expect(partial.length).toBeLessThan(meanwhile.length);
    persistence = await d.worker('persistence', ['--working-dir', d.logs]);
    const events = await closedRun(d.nats.url, runId);
    expect(events.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true } });
    await expectLogged(events);

    const next = await closedRun(d.nats.url, await submitRun(d.nats.url, 'the next run'));
    await expectLogged(next);
  }, 60_000);

  it('reports an orphan event on pge.errors.rejected and goes on: the next run is fully logged', async () => {
    const orphanRun = `orphan-${Date.now()}`;
    const orphan = {
      id: `${orphanRun}-evt-2`,
      runId: orphanRun,
      seq: 2,
      ts: new Date().toISOString(),
      type: 'step.started',
      payload: { stepId: 's1', stepNumber: 1, title: 'nobody started this run' },
    };
    const rejections = await rejectionsWhile(
      async () => {
        // Any client may publish on an event subject; JetStream stores it, persistence reads it.
        const nc = await connect({ servers: d.nats.url });
        await jetstream(nc).publish(`pge.run.${orphanRun}.evt.step.started`, JSON.stringify(orphan));
        await nc.close();
      },
      (seen) => seen.some((r) => r.subject.includes(orphanRun)),
    );
    expect(rejections.find((r) => r.subject.includes(orphanRun))).toMatchObject({
      subject: `pge.run.${orphanRun}.evt.step.started`,
      problem: expect.stringMatching(/no run\.started/),
    });
    expect(existsSync(logOf(orphanRun))).toBe(false);

    const events = await closedRun(d.nats.url, await submitRun(d.nats.url, 'a run after the orphan'));
    await expectLogged(events);
    // Nothing is left unacknowledged on the persistence consumer.
    const nc = await connect({ servers: d.nats.url });
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
    const events = await closedRun(d.nats.url, await submitRun(d.nats.url, 'a run someone writes after'));
    await expectLogged(events);
    const terminal = events.at(-1)!;
    const late = {
      id: `${terminal.runId}-late`,
      runId: terminal.runId,
      seq: terminal.seq + 1,
      ts: new Date().toISOString(),
      type: 'step.started',
      payload: { stepId: 's9', stepNumber: 9, title: 'after the end' },
    };
    const rejections = await rejectionsWhile(
      async () => {
        const nc = await connect({ servers: d.nats.url });
        await jetstream(nc).publish(`pge.run.${terminal.runId}.evt.step.started`, JSON.stringify(late));
        await nc.close();
      },
      (seen) => seen.some((r) => r.subject.includes(terminal.runId)),
    );
    expect(rejections.find((r) => r.subject.includes(terminal.runId))?.problem).toMatch(
      /came after its closing event/,
    );
    expect(await logged(terminal.runId)).toEqual(events);
  }, 60_000);
});
