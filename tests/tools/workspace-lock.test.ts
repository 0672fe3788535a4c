import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runValidators } from '../../src/tools/validators.js';
import { HIDDEN_DIR, Workspace, workspaceLock } from '../../src/tools/workspace.js';
import { STALE_MS } from '../../src/tools/workspace-lock.js';

/**
 * A validator run sees the workspace as no step writes it: it waits for a write in flight, and a
 * write waits for it, in one process and between processes that share the workspace.
 */

let base: string;
let dir: string;
const NEVER = new AbortController().signal;
beforeEach(() => {
  base = mkdtempSync(join(tmpdir(), 'pge-lock-'));
  dir = join(base, 'ws');
});
afterEach(() => rmSync(base, { recursive: true, force: true }));

const context = () => ({
  workspace: dir,
  output: '',
  runId: 'pge-run',
  stepId: 's1',
  stepNumber: 1,
  attempt: 1,
});

/** A promise and the function that settles it. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open = () => {};
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { opened, open };
}

/** Whether `promise` is still pending after `ms`. */
async function pendingAfter(promise: Promise<unknown>, ms: number): Promise<boolean> {
  const pending = Symbol('pending');
  return (await Promise.race([promise, sleep(ms, pending)])) === pending;
}

describe('the workspace lock', () => {
  it('makes a validator run wait for a write in flight, and see what it wrote', async () => {
    // A write in flight: holding the lock shared, as `Workspace.write` does while it writes.
    const release = await workspaceLock(dir).shared(NEVER);
    const seen: boolean[] = [];
    const validated = runValidators(
      [
        function sees() {
          seen.push(existsSync(join(dir, 'app.ts')));
          return { passed: true };
        },
      ],
      context(),
      NEVER,
    );
    expect(await pendingAfter(validated, 200)).toBe(true);
    expect(seen).toEqual([]);
    writeFileSync(join(dir, 'app.ts'), 'written');
    await release();
    const [run] = await validated;
    expect(run!.passed).toBe(true);
    expect(seen).toEqual([true]);
  });

  it('makes a write wait for a validator run, which sees the workspace unchanged', async () => {
    await new Workspace(dir).write('app.ts', 'before');
    const running = gate();
    const finish = gate();
    const contents: string[] = [];
    const validated = runValidators(
      [
        async function build() {
          running.open();
          contents.push(readFileSync(join(dir, 'app.ts'), 'utf8'));
          await finish.opened;
          contents.push(readFileSync(join(dir, 'app.ts'), 'utf8'));
          return { passed: true };
        },
      ],
      context(),
      NEVER,
    );
    await running.opened;
    const written = new Workspace(dir).write('app.ts', 'after');
    expect(await pendingAfter(written, 200)).toBe(true);
    finish.open();
    await validated;
    expect(await written).toBe('wrote 5 bytes to app.ts');
    expect(contents).toEqual(['before', 'before']);
    expect(readFileSync(join(dir, 'app.ts'), 'utf8')).toBe('after');
  });

  it('runs one validator run at a time', async () => {
    const finish = gate();
    const order: string[] = [];
    const first = runValidators(
      [
        async function first() {
          order.push('first starts');
          await finish.opened;
          order.push('first ends');
          return { passed: true };
        },
      ],
      context(),
      NEVER,
    );
    await sleep(50);
    const second = runValidators(
      [
        function second() {
          order.push('second runs');
          return { passed: true };
        },
      ],
      context(),
      NEVER,
    );
    expect(await pendingAfter(second, 200)).toBe(true);
    finish.open();
    await Promise.all([first, second]);
    expect(order).toEqual(['first starts', 'first ends', 'second runs']);
  });

  it('holds between processes: a write here waits for a validator run in another', async () => {
    mkdirSync(dir, { recursive: true });
    // The child's command says it runs, then waits for the test's word.
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        join(import.meta.dirname, '..', 'support', 'validate-in-child.ts'),
        dir,
        'touch running; while [ ! -e go ]; do sleep 0.02; done; cat app.ts',
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let printed = '';
    child.stdout.on('data', (chunk: Buffer) => {
      printed += chunk.toString('utf8');
    });
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
    try {
      await new Workspace(dir).write('app.ts', 'before');
      while (!existsSync(join(dir, 'running'))) await sleep(20);
      const written = new Workspace(dir).write('app.ts', 'after');
      expect(await pendingAfter(written, 300)).toBe(true);
      writeFileSync(join(dir, 'go'), '');
      await written;
      expect(await exited).toBe(0);
      expect(JSON.parse(printed)[0]).toMatchObject({ passed: true, output: 'before' });
      expect(readFileSync(join(dir, 'app.ts'), 'utf8')).toBe('after');
    } finally {
      child.kill();
    }
  });

  it("ends a wait for the lock with the signal's own reason", async () => {
    const release = await workspaceLock(dir).exclusive(NEVER);
    try {
      const cancelled = new AbortController();
      const waiting = workspaceLock(dir).shared(cancelled.signal);
      expect(await pendingAfter(waiting, 200)).toBe(true);
      const reason = new Error('run cancelled');
      cancelled.abort(reason);
      await expect(waiting).rejects.toBe(reason);
    } finally {
      await release();
    }
  });

  it("breaks a crashed holder's mark once it is stale, and not before", async () => {
    const exclusive = join(dirname(dir), HIDDEN_DIR, basename(dir), 'lock', 'exclusive');
    mkdirSync(exclusive, { recursive: true });
    // Fresh: a validator run in another process may hold it.
    const blocked = new AbortController();
    const waiting = new Workspace(dir).write('a.txt', 'a', blocked.signal);
    expect(await pendingAfter(waiting, 200)).toBe(true);
    blocked.abort(new Error('given up'));
    await expect(waiting).rejects.toThrow();
    expect(existsSync(join(dir, 'a.txt'))).toBe(false);
    // Untouched for longer than STALE_MS: its holder is gone.
    const past = (Date.now() - STALE_MS - 1_000) / 1_000;
    utimesSync(exclusive, past, past);
    expect(await new Workspace(dir).write('a.txt', 'a')).toBe('wrote 1 bytes to a.txt');
    // Likewise a write's mark, which a validator run waits for.
    const shared = join(dirname(dir), HIDDEN_DIR, basename(dir), 'lock', 'shared', 'crashed-writer');
    writeFileSync(shared, '');
    const validated = runValidators([() => ({ passed: true })], context(), NEVER);
    expect(await pendingAfter(validated, 200)).toBe(true);
    utimesSync(shared, past, past);
    const [run] = await validated;
    expect(run!.passed).toBe(true);
  });
});
