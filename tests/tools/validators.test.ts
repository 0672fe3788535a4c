import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runValidators } from '../../src/tools/validators.js';

/** The validators' own bounds: time, output, a function that throws, a call cancelled mid-run. */

let dir: string;
const context = () => ({
  workspace: join(dir, 'workspaces', 'pge-run'),
  output: 'the work',
  runId: 'pge-run',
  stepId: 's1',
  stepNumber: 1,
  attempt: 1,
});
const NEVER = new AbortController().signal;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'pge-validator-unit-'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** True while a process with this pid runs (a zombie, killed but not yet reaped, does not). */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

describe('runValidators', () => {
  it('stops a command past its time, with everything it started, and fails it', async () => {
    // The command starts a sleeper in the background and writes its pid, then waits itself.
    const [run] = await runValidators(['sleep 30 & echo $! > sleeper.pid; wait'], context(), NEVER, {
      timeoutMs: 300,
      maxOutputChars: 4000,
    });
    expect(run).toMatchObject({ passed: false, exitCode: null });
    expect(run!.output).toContain('[stopped: it ran longer than 300 ms]');
    expect(run!.durationMs).toBeLessThan(5000);
    const pid = Number(readFileSync(join(context().workspace, 'sleeper.pid'), 'utf8'));
    for (let i = 0; i < 50 && alive(pid); i++) await new Promise((r) => setTimeout(r, 20));
    expect(alive(pid)).toBe(false);
  });

  it('keeps the end of a long output, saying how much was cut', async () => {
    const [run] = await runValidators(
      ['for i in $(seq 1 2000); do echo "line $i"; done; exit 1'],
      context(),
      NEVER,
      { timeoutMs: 10_000, maxOutputChars: 100 },
    );
    expect(run).toMatchObject({ passed: false, exitCode: 1 });
    expect(run!.output).toMatch(/^\[\d+ earlier characters cut\]\n/);
    expect(run!.output.endsWith('line 2000\n')).toBe(true);
    expect(run!.output.length).toBeLessThan(140);
  });

  it('runs every validator in order, and a function that throws fails with what it threw', async () => {
    const runs = await runValidators(
      [
        'exit 2',
        () => {
          throw new Error('no renderer here');
        },
        async function checks({ output }) {
          return { passed: output === 'the work' };
        },
      ],
      context(),
      NEVER,
    );
    expect(runs.map((r) => [r.validator, r.passed, r.exitCode, r.output])).toEqual([
      ['exit 2', false, 2, ''],
      ['validator 2', false, null, 'it threw: no renderer here'],
      ['checks', true, null, ''],
    ]);
  });

  it('rejects when the call is cancelled, and kills the command', async () => {
    const controller = new AbortController();
    const running = runValidators(['echo started > started; sleep 30'], context(), controller.signal);
    const started = join(context().workspace, 'started');
    for (let i = 0; i < 250 && !existsSync(started); i++) await new Promise((r) => setTimeout(r, 20));
    controller.abort(new Error('cancelled by the run'));
    await expect(running).rejects.toThrow('cancelled by the run');
  });
});
