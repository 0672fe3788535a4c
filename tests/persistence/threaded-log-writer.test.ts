import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LogWriteError } from '../../src/errors.js';
import { readLogFile, renderLog, stopLogThread, ThreadedLogWriter } from '../../src/persistence/index.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { fullRun } from './fixtures.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'pge-thread-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const events = fullRun('run-a');

function writer(path: string, runId = 'run-a'): { log: ThreadedLogWriter; errors: LogWriteError[] } {
  const errors: LogWriteError[] = [];
  return { log: new ThreadedLogWriter({ path, runId, onError: (e) => errors.push(e) }), errors };
}

/** Events of a longer run than the fixture: more than one batch to the thread. */
function longRun(runId: string, copies: number): RunEvent[] {
  const base = fullRun(runId);
  const middle = base.slice(1, -1);
  const all = [base[0]!];
  for (let i = 0; i < copies; i++) all.push(...middle);
  all.push(base.at(-1)!);
  return all.map((e, i) => ({ ...e, seq: i + 1, id: `${runId}-${i + 1}` }) as RunEvent);
}

describe('ThreadedLogWriter (the log thread)', () => {
  it('writes the same bytes as the rendered log, across several batches to the thread', async () => {
    const path = join(dir, 'log.md');
    const long = longRun('run-a', 5);
    expect(long.length).toBeGreaterThan(100);
    const { log, errors } = writer(path);
    for (const event of long) log.append(event);
    await log.flushed();
    expect(await readFile(path, 'utf8')).toBe(renderLog(long));
    await log.close();
    expect(await readLogFile(path)).toEqual(long);
    expect(errors).toEqual([]);
  });

  it('writes two runs at once to two files, events held back until their seq comes', async () => {
    const a = writer(join(dir, 'a.md'), 'run-a');
    const b = writer(join(dir, 'b.md'), 'run-b');
    const runB = fullRun('run-b');
    for (const event of [...runB].reverse()) b.log.append(event);
    for (const event of events) a.log.append(event);
    for (const event of events.slice(0, 3)) a.log.append(event); // redelivered duplicates are ignored
    await Promise.all([a.log.close(), b.log.close()]);
    expect(await readFile(join(dir, 'a.md'), 'utf8')).toBe(renderLog(events));
    expect(await readFile(join(dir, 'b.md'), 'utf8')).toBe(renderLog(runB));
  });

  it('finishes only once a missing seq has arrived; close refuses to wait for it', async () => {
    const path = join(dir, 'log.md');
    const { log, errors } = writer(path);
    for (const event of events.filter((e) => e.seq !== 5)) log.append(event);
    let finished = false;
    const finishing = log.finish().then(() => {
      finished = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(finished).toBe(false);
    log.append(events[4]!);
    await finishing;
    expect(await readFile(path, 'utf8')).toBe(renderLog(events));
    expect(() => log.append(events[0]!)).toThrow('is closed');

    const other = writer(join(dir, 'other.md'));
    other.log.append(events[0]!);
    other.log.append(events[2]!);
    await expect(other.log.close()).rejects.toThrow('events 3 still wait for seq 2');
    expect(other.errors).toHaveLength(1);
    expect(errors).toEqual([]);
  });

  it('never touches a file that holds another run, and reports it once', async () => {
    const path = join(dir, 'log.md');
    const other = renderLog(fullRun('run-b').slice(0, 4));
    await writeFile(path, other);
    const { log, errors } = writer(path);
    log.append(events[0]!);
    await expect(log.flushed()).rejects.toThrow(
      `${path} already holds run run-b; pge never overwrites a log`,
    );
    expect(errors).toHaveLength(1);
    expect(() => log.append(events[1]!)).toThrow(errors[0]);
    await expect(log.close()).rejects.toThrow(LogWriteError);
    expect(await readFile(path, 'utf8')).toBe(other);
  });

  it('refuses events of another run on the caller side', () => {
    const { log } = writer(join(dir, 'log.md'));
    expect(() => log.append(fullRun('run-b')[0]!)).toThrow(
      'event of run run-b given to the log of run run-a',
    );
    return log.close();
  });

  it('fails every open writer when the thread stops, and the next writer starts a new thread', async () => {
    const first = writer(join(dir, 'first.md'));
    first.log.append(events[0]!);
    await first.log.flushed();
    await stopLogThread();
    expect(first.errors).toHaveLength(1);
    expect(first.errors[0]!.message).toMatch(/log thread was stopped/);
    expect(() => first.log.append(events[1]!)).toThrow(LogWriteError);

    const second = writer(join(dir, 'second.md'));
    for (const event of events) second.log.append(event);
    await second.log.close();
    expect(await readLogFile(join(dir, 'second.md'))).toEqual(events);
    expect(second.errors).toEqual([]);
  });
});
