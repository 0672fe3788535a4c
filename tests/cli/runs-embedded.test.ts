import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { renderLog } from '../../src/persistence/index.js';
import type { RunSummary } from '../../src/runtime/run-list.js';
import { fullRun, makeEvent } from '../persistence/fixtures.js';
import { runCli } from './run-cli.js';

/**
 * `pge runs` and `pge approvals` without a deployment: the embedded runs of a working directory,
 * read from their logs as the embedded host reads them, so a folder of logs is listed, not "no
 * runs" from a NATS server nobody asked for. With NATS_URL set, the deployment is asked instead.
 */

let tmp: string;
beforeEach(() => {
  tmp = mkdtempSync(join(tmpdir(), 'pge-runs-embedded-'));
});
afterEach(() => rmSync(tmp, { recursive: true, force: true }));

/** A log of a run waiting at its plan gate, as a process that was stopped there left it. */
function writeWaitingLog(dir: string, runId: string): void {
  const events = [
    ...fullRun(runId).slice(0, 4),
    makeEvent(runId, 5, {
      type: 'approval.requested',
      payload: { gate: 'plan', stepId: null, stepNumber: null, attempt: null, summary: 'one step' },
    }),
  ];
  writeFileSync(join(dir, `pge_shared_state_${runId}.md`), renderLog(events));
}

describe('pge runs, embedded', () => {
  it('lists the runs whose logs are in the working directory, and the gates they wait at', async () => {
    const demo = await runCli(['demo', '--json'], { cwd: tmp });
    expect(demo.code).toBe(0);
    const passed = (JSON.parse(demo.stdout) as { runId: string }).runId;
    writeWaitingLog(tmp, 'r-waiting');

    const listed = await runCli(['runs', '--json'], { cwd: tmp, env: { NATS_URL: '' } });
    expect(listed.code).toBe(0);
    const runs = JSON.parse(listed.stdout) as RunSummary[];
    expect(runs.map((r) => [r.runId, r.status])).toEqual(
      expect.arrayContaining([
        [passed, 'passed'],
        ['r-waiting', 'waiting'],
      ]),
    );
    expect(runs).toHaveLength(2);

    const table = await runCli(['runs', '--status', 'waiting'], { cwd: tmp, env: { NATS_URL: '' } });
    expect(table.stdout).toContain('r-waiting');
    expect(table.stdout).not.toContain(passed);

    const gates = await runCli(['approvals', '--json'], { cwd: tmp, env: { NATS_URL: '' } });
    expect(gates.code).toBe(0);
    expect(JSON.parse(gates.stdout)).toEqual([expect.objectContaining({ runId: 'r-waiting', gate: 'plan' })]);
  });

  it('reads another directory with --working-dir, and says "no runs" for one without logs', async () => {
    const demo = await runCli(['demo', '--working-dir', 'runs', '--json'], { cwd: tmp });
    expect(demo.code).toBe(0);
    const there = await runCli(['runs', '--working-dir', 'runs'], { cwd: tmp, env: { NATS_URL: '' } });
    expect(there.stdout).toContain((JSON.parse(demo.stdout) as { runId: string }).runId);
    const here = await runCli(['runs'], { cwd: tmp, env: { NATS_URL: '' } });
    expect(here.stdout).toBe('no runs\n');
  });
});
