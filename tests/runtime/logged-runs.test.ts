import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { renderLog } from '../../src/persistence/index.js';
import { listLoggedRuns } from '../../src/runtime/logged-runs.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { fullRun, makeEvent } from '../persistence/fixtures.js';

/**
 * The embedded runtime's runs, listed from the logs of a working directory as a deployment's are
 * listed from its stream: statuses, steps and cost from the same events, a log torn by a crash read
 * up to its last whole event, files that are not pge logs passed over, and a log that cannot be
 * read named as a problem without hiding the others.
 */

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'pge-logged-runs-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const write = (name: string, text: string) => writeFileSync(join(dir, name), text);
const logOf = (runId: string, events: readonly RunEvent[]) =>
  write(`pge_shared_state_${runId}.md`, renderLog(events));

/** The fixture run up to its plan, then waiting at the plan's gate. */
function waitingRun(runId: string): RunEvent[] {
  return [
    ...fullRun(runId).slice(0, 4),
    makeEvent(runId, 5, {
      type: 'approval.requested',
      payload: { gate: 'plan', stepId: null, stepNumber: null, attempt: null, summary: 'one step' },
    }),
  ];
}

describe('listLoggedRuns', () => {
  it('lists the runs of a directory of logs with the statuses a deployment would show', async () => {
    logOf('r-passed', fullRun('r-passed'));
    logOf('r-waiting', waitingRun('r-waiting'));
    const open = fullRun('r-open').slice(0, -1);
    // A crash cut the last write short: the run is read up to its last whole event.
    const torn = renderLog(open);
    write(
      'pge_shared_state_r-open.md',
      `${torn}\n<!-- pge:event seq=${open.length + 1} type=run.completed -->\n\`\`\`json\n{"id":`,
    );
    write('notes.md', '# My notes\n\nnot a log\n');
    write('README.txt', 'ignored: not markdown');
    const { runs, problems } = await listLoggedRuns(dir);
    expect(problems).toEqual([]);
    expect(runs.map((r) => [r.runId, r.status, r.stepsPassed, r.stepsTotal, r.lastEvent])).toEqual(
      expect.arrayContaining([
        ['r-passed', 'passed', 1, 1, 'run.completed'],
        ['r-waiting', 'waiting', 0, 1, 'approval.requested'],
        ['r-open', 'running', 1, 1, open.at(-1)!.type],
      ]),
    );
    expect(runs).toHaveLength(3);
    const waiting = await listLoggedRuns(dir, { statuses: ['waiting'] });
    expect(waiting.runs.map((r) => r.runId)).toEqual(['r-waiting']);
  });

  it('names a log it cannot read, and still lists the others', async () => {
    logOf('r-passed', fullRun('r-passed'));
    const events = fullRun('r-broken');
    // Two events with the same seq: damage no crash makes, so the log is refused, not cut.
    write('pge_shared_state_r-broken.md', renderLog([...events.slice(0, 3), events[1]!, ...events.slice(3)]));
    const { runs, problems } = await listLoggedRuns(dir);
    expect(runs.map((r) => r.runId)).toEqual(['r-passed']);
    expect(problems).toHaveLength(1);
    expect(problems[0]).toContain('pge_shared_state_r-broken.md');
  });

  it('rejects a directory that does not exist', async () => {
    await expect(listLoggedRuns(join(dir, 'missing'))).rejects.toThrow(/ENOENT/);
  });
});
