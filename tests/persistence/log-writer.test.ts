import { existsSync } from 'node:fs';
import { mkdtemp, open, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { LogWriteError } from '../../src/errors.js';
import { type LogIo, LogWriter, readLogFile, renderLog } from '../../src/persistence/index.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { fullRun } from './fixtures.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'pge-writer-'));
});
afterEach(async () => {
  vi.restoreAllMocks();
  await rm(dir, { recursive: true, force: true });
});

const events = fullRun('run-a');

/** A writer whose failures are recorded, so a test can assert that onError saw exactly them. */
function writerWith(io: LogIo, path: string, runId = 'run-a'): { log: LogWriter; errors: LogWriteError[] } {
  const errors: LogWriteError[] = [];
  return { log: new LogWriter({ path, runId, io, onError: (e) => errors.push(e) }), errors };
}

/** A fixed permutation (no randomness in tests): odd positions reversed, then even positions. */
function scramble<T>(items: readonly T[]): T[] {
  const odd = items.filter((_, i) => i % 2 === 1).reverse();
  return [...odd, ...items.filter((_, i) => i % 2 === 0)];
}

// Every behaviour holds for both ways of writing the file (the log thread uses `sync`).
describe.each(['async', 'sync'] as const)('LogWriter (%s writes)', (io) => {
  const writer = (path: string, runId = 'run-a') => writerWith(io, path, runId);
  it('writes the rendered log, byte for byte', async () => {
    const path = join(dir, 'log.md');
    const { log, errors } = writer(path);
    for (const event of events) log.append(event);
    await log.flushed();
    expect(await readFile(path, 'utf8')).toBe(renderLog(events));
    await log.close();
    expect(await readLogFile(path)).toEqual(events);
    expect(errors).toEqual([]);
  });

  it('holds events back until every lower seq has arrived, then writes them in seq order', async () => {
    const path = join(dir, 'log.md');
    const { log } = writer(path);
    const scrambled = scramble(events).filter((e) => e.seq !== 1);
    for (const event of scrambled) log.append(event);
    await log.ready;
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect((await stat(path)).size).toBe(0);
    log.append(events[0]!);
    for (const event of events.slice(0, 5)) log.append(event); // redelivered duplicates are ignored
    await log.flushed();
    await log.close();
    expect(await readFile(path, 'utf8')).toBe(renderLog(events));
  });

  it('never touches a file that holds another run', async () => {
    const path = join(dir, 'log.md');
    const other = renderLog(fullRun('run-b').slice(0, 4));
    await writeFile(path, other);
    const errors: LogWriteError[] = [];
    const opening = LogWriter.open({ path, runId: 'run-a', io, onError: (e) => errors.push(e) });
    await expect(opening).rejects.toThrow(LogWriteError);
    await expect(opening).rejects.toThrow(`${path} already holds run run-b; pge never overwrites a log`);
    expect(errors).toHaveLength(1);
    expect(await readFile(path, 'utf8')).toBe(other);
  });

  it('lets only one of two writers that start together on a new path have it', async () => {
    const path = join(dir, 'shared.md');
    const opened = await Promise.allSettled([
      LogWriter.open({ path, runId: 'run-a', io, onError: () => undefined }),
      LogWriter.open({ path, runId: 'run-b', io, onError: () => undefined }),
    ]);
    const winners = opened.filter((o) => o.status === 'fulfilled');
    const losers = opened.filter((o) => o.status === 'rejected');
    expect(winners).toHaveLength(1);
    expect(losers).toHaveLength(1);
    expect(String((losers[0] as PromiseRejectedResult).reason)).toMatch(
      /pge never (shares|overwrites) a log/,
    );
    await (winners[0] as PromiseFulfilledResult<LogWriter>).value.close();
  });

  it('never touches a file that is not a pge log', async () => {
    const path = join(dir, 'notes.md');
    await writeFile(path, '# My notes\n');
    const { log, errors } = writer(path);
    log.append(events[0]!);
    await expect(log.flushed()).rejects.toThrow('is not a pge log');
    expect(errors).toHaveLength(1);
    expect(await readFile(path, 'utf8')).toBe('# My notes\n');
  });

  it("resumes its own run's log after the last event it holds", async () => {
    const path = join(dir, 'log.md');
    const first = writer(path);
    for (const event of events.slice(0, 10)) first.log.append(event);
    await first.log.close();
    const second = writer(path);
    for (const event of events) second.log.append(event);
    await second.log.close();
    expect(await readFile(path, 'utf8')).toBe(renderLog(events));
    expect(first.errors.concat(second.errors)).toEqual([]);
  });

  it('reports an unwritable directory through onError and flushed()', async () => {
    await writeFile(join(dir, 'file'), 'x');
    const { log, errors } = writer(join(dir, 'file', 'log.md'));
    log.append(events[0]!);
    await expect(log.flushed()).rejects.toThrow(LogWriteError);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(LogWriteError);
    expect(() => log.append(events[1]!)).toThrow(errors[0]);
    await expect(log.close()).rejects.toBe(errors[0]);
  });

  it.skipIf(!existsSync('/dev/full'))('stops at the first failed write (needs Linux /dev/full)', async () => {
    const { log, errors } = writer('/dev/full');
    log.append(events[0]!);
    log.append(events[1]!);
    await expect(log.flushed()).rejects.toThrow(/cannot write \/dev\/full/);
    expect(errors).toHaveLength(1);
    expect(() => log.append(events[2]!)).toThrow(LogWriteError);
    await expect(log.flushed()).rejects.toBe(errors[0]);
  });

  it('refuses to close with a missing seq, and refuses events of another run or after close', async () => {
    const path = join(dir, 'log.md');
    const { log, errors } = writer(path);
    log.append(events[0]!);
    log.append(events[2]!);
    expect(() => log.append(fullRun('run-b')[1] as RunEvent)).toThrow(
      'event of run run-b given to the log of run run-a',
    );
    await expect(log.close()).rejects.toThrow('events 3 still wait for seq 2');
    expect(errors).toHaveLength(1);
    expect(() => log.append(events[1]!)).toThrow(LogWriteError);
    expect(await readFile(path, 'utf8')).toBe(renderLog(events.slice(0, 1)));
  });
});

it('coalesces the events appended during an async write into one write', async () => {
  const path = join(dir, 'log.md');
  const probe = await open(join(dir, 'probe'), 'w');
  const write = vi.spyOn(Object.getPrototypeOf(probe) as { write: () => unknown }, 'write');
  await probe.close();
  const log = await LogWriter.open({ path, runId: 'run-a', onError: () => undefined });
  for (const event of events) log.append(event);
  await log.flushed();
  await log.close();
  // The first event starts a write; the other 30 pile up behind it and go out together.
  expect(write.mock.calls.length).toBeLessThanOrEqual(2);
  expect(await readFile(path, 'utf8')).toBe(renderLog(events));
});
