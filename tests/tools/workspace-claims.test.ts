import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ToolError } from '../../src/tools/tool-error.js';
import { runToolCall, workspaceTools } from '../../src/tools/tools.js';
import { HIDDEN_DIR, Workspace } from '../../src/tools/workspace.js';
import type { WorkspaceWriter } from '../../src/tools/workspace-claims.js';

/**
 * Steps that share a run's workspace never write the same path, unless one builds on the other;
 * claims live in the file system, so each write is made through a fresh `Workspace`, as a worker
 * (in this process or another) makes one per request.
 */

let base: string;
let dir: string;
beforeEach(() => {
  base = mkdtempSync(join(tmpdir(), 'pge-claims-'));
  dir = join(base, 'ws');
});
afterEach(() => rmSync(base, { recursive: true, force: true }));

/**
 * The plan: s1 and s2 side by side; s3 builds on s1; s4 on s3 (so on s1 through it); s5 on s1.
 */
const PLAN = ['s1', 's2', 's3', 's4', 's5'];
const DEPENDS_ON: Record<string, string[]> = { s1: [], s2: [], s3: ['s1'], s4: ['s3'], s5: ['s1'] };
const step = (stepId: string, planStepIds = PLAN): WorkspaceWriter => ({
  stepId,
  title: `Title of ${stepId}`,
  dependsOn: DEPENDS_ON[stepId] ?? [],
  planStepIds,
});
/** The workspace of one work request of `stepId`, its work begun, as the generator's worker makes it. */
const workOf = async (stepId: string, plan = PLAN) => {
  const workspace = new Workspace(dir, step(stepId, plan));
  await workspace.recordWriter();
  return workspace;
};
const write = async (stepId: string, path: string, content = stepId, plan = PLAN) =>
  (await workOf(stepId, plan)).write(path, content);

describe('workspace claims', () => {
  it('refuses a path another step holds, naming that step, and leaves the file as it was', async () => {
    await write('s1', 'src/app.ts', 'from s1');
    await expect(write('s2', 'src/app.ts', 'from s2')).rejects.toThrow(
      new ToolError('"src/app.ts" is held by step s1 ("Title of s1"); write elsewhere'),
    );
    expect(readFileSync(join(dir, 'src', 'app.ts'), 'utf8')).toBe('from s1');
    // Its own path stays its own, attempt after attempt; another path is free.
    await write('s1', 'src/app.ts', 'from s1, again');
    await write('s2', 'src/other.ts');
    await expect(write('s1', 'src/other.ts')).rejects.toThrow('held by step s2 ("Title of s2")');
  });

  it('of two steps that write one path at the same time, never lets both through', async () => {
    for (let round = 0; round < 20; round++) {
      const path = `race/${round}.txt`;
      const settled = await Promise.allSettled([write('s1', path), write('s2', path)]);
      const through = settled.filter((s) => s.status === 'fulfilled');
      expect(through.length, `round ${round}`).toBeLessThanOrEqual(1);
      for (const [i, s] of settled.entries())
        if (s.status === 'rejected') {
          const other = i === 0 ? 's2' : 's1';
          expect(s.reason.message).toBe(
            `"${path}" is held by step ${other} ("Title of ${other}"); write elsewhere`,
          );
        }
      if (through.length === 1)
        expect(readFileSync(join(dir, path), 'utf8')).toBe(settled[0]!.status === 'fulfilled' ? 's1' : 's2');
    }
  });

  it('lets a step take over a path of a step it builds on, directly or through others', async () => {
    await write('s1', 'notes.md', 'draft');
    await write('s3', 'notes.md', 'revised by s3');
    await write('s4', 'notes.md', 'revised by s4');
    expect(readFileSync(join(dir, 'notes.md'), 'utf8')).toBe('revised by s4');
    // s5 builds on s1, not on s3, which took the path over: s3 holds it against s5, and s2 builds
    // on none of them.
    await expect(write('s5', 'notes.md')).rejects.toThrow('"notes.md" is held by step s3 ("Title of s3")');
    await expect(write('s2', 'notes.md')).rejects.toThrow('"notes.md" is held by step s1 ("Title of s1")');
    // A step never takes a path over from one that builds on it.
    await write('s2', 'b.md');
    await expect(write('s1', 'notes.md')).rejects.toThrow('held by step s3');
  });

  it('knows what a step builds on through a step that wrote nothing, from its record', async () => {
    await write('s1', 'notes.md', 'draft');
    // s4 builds on s1 through s3, whose work began (and was recorded) though it wrote no file.
    await expect(new Workspace(dir, step('s4')).write('notes.md', 'x')).rejects.toThrow('held by step s1');
    await workOf('s3');
    await write('s4', 'notes.md', 'revised by s4');
    expect(readFileSync(join(dir, 'notes.md'), 'utf8')).toBe('revised by s4');
  });

  it('frees the paths of a step that a replan dropped', async () => {
    await write('s2', 'old.md');
    await expect(write('s1', 'old.md')).rejects.toThrow('held by step s2');
    await write('s1', 'old.md', 'after the replan', ['s1', 's3']);
    expect(readFileSync(join(dir, 'old.md'), 'utf8')).toBe('after the replan');
  });

  it('knows one file by every name it has: dots, climbs back in, and links in the workspace', async () => {
    await write('s1', 'src/app.ts');
    mkdirSync(join(dir, 'lib'));
    symlinkSync(join(dir, 'src'), join(dir, 'lib', 'src'));
    for (const path of ['./src/app.ts', 'src/../src/app.ts', 'src//app.ts', 'lib/src/app.ts'])
      await expect(write('s2', path), path).rejects.toThrow('"src/app.ts" is held by step s1');
  });

  it('writes as before without a step: a workspace of the API, with no plan', async () => {
    await write('s1', 'a.txt');
    await new Workspace(dir).write('a.txt', 'anyone');
    expect(readFileSync(join(dir, 'a.txt'), 'utf8')).toBe('anyone');
  });
});

describe("pge's hidden directory", () => {
  it('is never listed, read, written or shown as an image, however it is named', async () => {
    await write('s1', 'a.txt');
    await new Workspace(dir).write('b.txt', 'b');
    // The claims and the lock are kept beside the workspace, which holds only what steps wrote …
    const state = join(dirname(dir), HIDDEN_DIR, basename(dir));
    expect(readdirSync(state)).toEqual(expect.arrayContaining(['claims', 'lock']));
    expect(readdirSync(dir).sort()).toEqual(['a.txt', 'b.txt']);
    // … and a directory of that name in a workspace is as much out of the tools' reach.
    mkdirSync(join(dir, HIDDEN_DIR));
    writeFileSync(join(dir, HIDDEN_DIR, 'render.png'), 'png');
    symlinkSync(join(dir, HIDDEN_DIR), join(dir, 'peek'));
    // … and out of the tools' reach.
    const workspace = await workOf('s2');
    expect(workspace.list()).toEqual(['a.txt', 'b.txt']);
    expect(await workspace.images()).toEqual([]);
    const tools = new Map(workspaceTools(workspace, true).map((t) => [t.definition.name, t]));
    const call = async (name: string, args: object) =>
      (await runToolCall({ id: 'c', name, arguments: JSON.stringify(args) }, tools, LIMITS, NEVER)).answer;
    expect(await call('list_files', {})).toBe('a.txt\nb.txt');
    for (const path of [
      `${HIDDEN_DIR}/render.png`,
      `./${HIDDEN_DIR}/claims`,
      `x/../${HIDDEN_DIR}/lock`,
      'peek/render.png',
    ]) {
      expect(await call('read_file', { path }), path).toMatch(
        /^error: .* is in \.pge, which pge keeps for itself$/,
      );
      expect(await call('write_file', { path, content: 'x' }), path).toMatch(
        /is in \.pge, which pge keeps for itself$/,
      );
    }
    expect(await call('write_file', { path: `${HIDDEN_DIR}`, content: 'x' })).toMatch(
      /which pge keeps for itself$/,
    );
    expect(existsSync(join(dir, HIDDEN_DIR, 'claims', 'x'))).toBe(false);
    expect(await call('read_file', { path: `../${HIDDEN_DIR}/${basename(dir)}/steps/s1` })).toMatch(
      /^error: /,
    );
    expect(readFileSync(join(dir, HIDDEN_DIR, 'render.png'), 'utf8')).toBe('png');
  });
});

const NEVER = new AbortController().signal;
const LIMITS = { maxCalls: 10, timeoutMs: 5_000, maxOutputChars: 1_000 };
