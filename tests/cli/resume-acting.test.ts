import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readLogFile, renderLog } from '../../src/persistence/index.js';
import type { RunEvent, RunEventOf } from '../../src/schemas/index.js';
import { runCli } from './run-cli.js';

/**
 * `pge resume` of a run that had validators or no workspace tools: its log records them, and a
 * resume without the same is refused before anything is asked, rather than going on unchecked (a
 * run whose every attempt failed its validator came back passed).
 */

let tmp: string;
beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), 'pge-resume-acting-'));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const FAILING = 'exit 1';

/** The events of `log` up to step 2's first work request, as a crash then may leave them, in a new log. */
async function crashedCopy(log: string, name: string): Promise<{ path: string; events: RunEvent[] }> {
  const events = await readLogFile(log);
  const step2 = events.findIndex((e) => e.type === 'step.started' && e.payload.stepNumber === 2);
  const cut = events.findIndex((e, i) => i > step2 && e.type === 'step.work.requested') + 1;
  expect(step2).toBeGreaterThan(0);
  expect(cut).toBeGreaterThan(step2 + 1);
  const path = join(tmp, name);
  writeFileSync(path, renderLog(events.slice(0, cut)));
  return { path, events: events.slice(0, cut) };
}

const closing = async (log: string) =>
  (await readLogFile(log)).at(-1) as RunEventOf<'run.completed'> | RunEventOf<'run.failed'>;

describe('pge resume holds a run to the tools and validators its log recorded', () => {
  it('refuses a demo run resumed without its validator, and finishes it with it as it would have ended', async () => {
    const log = join(tmp, 'validated.md');
    const full = await runCli(['demo', '--validate', FAILING, '--log', log], { cwd: tmp });
    // Every attempt fails the validator: no step passes.
    expect(full.code, full.stderr).toBe(1);
    const started = (await readLogFile(log))[0] as RunEventOf<'run.started'>;
    expect(started.payload.settings.acting).toEqual({
      tools: true,
      validators: [FAILING],
      workspace: join(tmp, 'workspaces', started.runId),
    });

    const crashed = await crashedCopy(log, 'validated-crashed.md');
    const bare = await runCli(['resume', crashed.path], { cwd: tmp });
    expect(bare.code).toBe(2);
    expect(bare.stderr).toContain(
      `its run had the workspace tools and the validators "${FAILING}"; this harness has the workspace tools and the validators "titledDeliverable"`,
    );
    expect(await readLogFile(crashed.path)).toEqual(crashed.events);

    const resumed = await runCli(['resume', crashed.path, '--validate', FAILING], { cwd: tmp });
    expect(resumed.code, resumed.stderr).toBe(1);
    expect((await closing(crashed.path)).payload).toMatchObject({ passed: false });
  });

  it('finds the run in its own working directory from anywhere, and refuses another', async () => {
    mkdirSync(join(tmp, 'elsewhere'));
    const log = join(tmp, 'runs', 'away.md');
    const full = await runCli(['demo', '--working-dir', 'runs', '--log', log], { cwd: tmp });
    expect(full.code, full.stderr).toBe(0);
    const started = (await readLogFile(log))[0] as RunEventOf<'run.started'>;
    const workspace = join(tmp, 'runs', 'workspaces', started.runId);
    expect(started.payload.settings.acting?.workspace).toBe(workspace);
    const crashed = await crashedCopy(log, 'away-crashed.md');
    const before = readdirSync(workspace);
    expect(before.length).toBeGreaterThan(0);

    // From another directory, as `pge resume --help` shows it: the workspace is the run's.
    const resumed = await runCli(['resume', crashed.path], { cwd: join(tmp, 'elsewhere') });
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(existsSync(join(tmp, 'elsewhere', 'workspaces'))).toBe(false);
    expect(readdirSync(workspace)).toEqual(expect.arrayContaining(before));

    const again = await crashedCopy(log, 'away-crashed-again.md');
    const other = await runCli(['resume', again.path, '--working-dir', 'elsewhere'], { cwd: tmp });
    expect(other.code).toBe(2);
    expect(other.stderr).toContain(`its run's workspace is ${workspace}`);
    expect(other.stderr).toContain(`Resume it with the working directory it had, ${join(tmp, 'runs')}`);
  });

  it('resumes a plain demo run with the demo validator, and refuses tools the run did not have', async () => {
    const log = join(tmp, 'demo.md');
    const full = await runCli(['demo', '--no-tools', '--log', log], { cwd: tmp });
    expect(full.code, full.stderr).toBe(0);
    const crashed = await crashedCopy(log, 'demo-crashed.md');

    const withTools = await runCli(['resume', crashed.path], { cwd: tmp });
    expect(withTools.code).toBe(2);
    expect(withTools.stderr).toContain(
      'its run had no workspace tools and the validators "titledDeliverable"; this harness has the workspace tools and the validators "titledDeliverable"',
    );

    const resumed = await runCli(['resume', crashed.path, '--no-tools'], { cwd: tmp });
    expect(resumed.code, resumed.stderr).toBe(0);
    expect((await closing(crashed.path)).payload).toMatchObject({ passed: true });
  });

  it('resumes a demo run as pge demo runs, from the flags alone: a config file here does not change its tools', async () => {
    const dir = join(tmp, 'configured');
    mkdirSync(dir);
    const log = join(dir, 'demo.md');
    writeFileSync(join(dir, 'pge.config.json'), JSON.stringify({ tools: false }));
    const full = await runCli(['demo', '--log', log], { cwd: dir });
    expect(full.code, full.stderr).toBe(0);
    const crashed = await crashedCopy(log, 'configured-crashed.md');
    const resumed = await runCli(['resume', crashed.path], { cwd: dir });
    expect(resumed.code, resumed.stderr).toBe(0);
  });

  it("refuses the workers' flags with --nats: a deployment's workers have their own", async () => {
    const r = await runCli(
      ['resume', '--nats', 'nats://127.0.0.1:1', 'pge-some-run', '--validate', 'true', '--no-tools'],
      { cwd: tmp },
    );
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(
      '--validate, --no-tools: the workers of a deployment have their own; give them to `pge worker`, not to `pge resume --nats`',
    );
  });
});
