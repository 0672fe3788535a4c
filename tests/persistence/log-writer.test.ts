import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { LogWriteError } from '../../src/errors.js';
import { LogWriter, readLogFile, renderLog } from '../../src/persistence/index.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { fullRun } from './fixtures.js';

/** Calls of `writeSync` (how the writer appends to a regular file); `failing` makes them throw EIO. */
const inline = vi.hoisted(() => ({ writes: 0, failing: false }));
vi.mock('node:fs', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:fs')>();
  const writeSync = ((...args: Parameters<typeof actual.writeSync>) => {
    inline.writes++;
    if (inline.failing) throw Object.assign(new Error('EIO: i/o error, write'), { code: 'EIO' });
    return actual.writeSync(...args);
  }) as typeof actual.writeSync;
  return { ...actual, writeSync, default: { ...actual, writeSync } };
});

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'pge-writer-'));
});
afterEach(async () => {
  vi.restoreAllMocks();
  inline.failing = false;
  await rm(dir, { recursive: true, force: true });
});

const events = fullRun('run-a');

/** A writer whose failures are recorded, so a test can assert that onError saw exactly them. */
function writer(path: string, runId = 'run-a'): { log: LogWriter; errors: LogWriteError[] } {
  const errors: LogWriteError[] = [];
  return { log: new LogWriter({ path, runId, onError: (e) => errors.push(e) }), errors };
}

/** Events of a longer run than the fixture: more events than one write takes. */
function longRun(runId: string, copies: number): RunEvent[] {
  const base = fullRun(runId);
  const middle = base.slice(1, -1);
  const all = [base[0]!];
  for (let i = 0; i < copies; i++) all.push(...middle);
  all.push(base.at(-1)!);
  return all.map((e, i) => ({ ...e, seq: i + 1, id: `${runId}-${i + 1}` }) as RunEvent);
}

/** Waits until `log` has written `list`, checks the file holds it byte for byte, then closes it. */
async function expectWritten(path: string, w: ReturnType<typeof writer>, list: readonly RunEvent[]) {
  await w.log.flushed();
  expect(await readFile(path, 'utf8')).toBe(renderLog(list));
  await w.log.close();
  expect(await readLogFile(path)).toEqual(list);
  expect(w.errors).toEqual([]);
}

/** A fixed permutation (no randomness in tests): odd positions reversed, then even positions. */
function scramble<T>(items: readonly T[]): T[] {
  const odd = items.filter((_, i) => i % 2 === 1).reverse();
  return [...odd, ...items.filter((_, i) => i % 2 === 0)];
}

describe('LogWriter', () => {
  it('writes the rendered log, byte for byte', async () => {
    const path = join(dir, 'log.md');
    const w = writer(path);
    for (const event of events) w.log.append(event);
    await expectWritten(path, w, events);
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

  it('writes a long run, appended over many turns of the event loop, as the rendered log', async () => {
    const path = join(dir, 'log.md');
    const long = longRun('run-a', 5);
    expect(long.length).toBeGreaterThan(100);
    const w = writer(path);
    for (let at = 0; at < long.length; at += 7) {
      for (const event of long.slice(at, at + 7)) w.log.append(event);
      await new Promise((resolve) => setImmediate(resolve));
    }
    await expectWritten(path, w, long);
  });

  it('writes two runs at once to two files, each in seq order whatever the order of arrival', async () => {
    const a = writer(join(dir, 'a.md'), 'run-a');
    const b = writer(join(dir, 'b.md'), 'run-b');
    const runB = fullRun('run-b');
    for (const event of [...runB].reverse()) b.log.append(event);
    for (const event of events) a.log.append(event);
    for (const event of events.slice(0, 3)) a.log.append(event); // redelivered duplicates are ignored
    await Promise.all([a.log.close(), b.log.close()]);
    expect(await readFile(join(dir, 'a.md'), 'utf8')).toBe(renderLog(events));
    expect(await readFile(join(dir, 'b.md'), 'utf8')).toBe(renderLog(runB));
    expect([...a.errors, ...b.errors]).toEqual([]);
  });

  it('finishes only once a missing seq has arrived, then takes no more events', async () => {
    const path = join(dir, 'log.md');
    const { log, errors } = writer(path);
    for (const event of events.filter((e) => e.seq !== 5)) log.append(event);
    let finished = false;
    const finishing = log.finish().then(() => {
      finished = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(finished).toBe(false);
    expect((await readLogFile(path)).map((e) => e.seq)).toEqual([1, 2, 3, 4]);
    log.append(events[4]!);
    await finishing;
    expect(await readFile(path, 'utf8')).toBe(renderLog(events));
    expect(() => log.append({ ...events[30]!, seq: 32 } as RunEvent)).toThrow(
      'comes after its closing event (seq 31)',
    );
    expect(errors).toEqual([]);
  });

  it('ends the log with the closing event: what is held above it is dropped, and later events refused', async () => {
    const path = join(dir, 'log.md');
    const { log, errors } = writer(path);
    const closing = events.at(-1)!;
    const after = { ...events[5]!, id: 'after', seq: closing.seq + 2 } as RunEvent;
    await log.ready;
    for (const event of events.slice(0, 10)) log.append(event);
    log.append(after);
    expect(log.missingSeq).toBe(11);
    expect(log.waiting()).toEqual([after]);
    for (const event of events.slice(10)) log.append(event);
    expect(log.waiting()).toEqual([]);
    expect(() => log.append({ ...after, seq: closing.seq + 1 } as RunEvent)).toThrow(
      `comes after its closing event (seq ${closing.seq})`,
    );
    expect(() => log.append({ ...closing, seq: 7 } as RunEvent)).toThrow(
      `${closing.type} (seq 7) of run run-a is a second closing event; the log ${path} ends at seq ${closing.seq}`,
    );
    await log.finish();
    expect(await readFile(path, 'utf8')).toBe(renderLog(events));
    expect(errors).toEqual([]);
  });

  it('resumes a log that already ends with its closing event without adding to it', async () => {
    const path = join(dir, 'log.md');
    await writeFile(path, renderLog(events));
    const { log, errors } = writer(path);
    await log.ready;
    log.append(events[3]!);
    expect(() => log.append({ ...events[3]!, seq: events.length + 1 } as RunEvent)).toThrow(
      'comes after its closing event',
    );
    await log.close();
    expect(await readFile(path, 'utf8')).toBe(renderLog(events));
    expect(errors).toEqual([]);
  });

  it('never touches a file that holds another run', async () => {
    const path = join(dir, 'log.md');
    const other = renderLog(fullRun('run-b').slice(0, 4));
    await writeFile(path, other);
    const errors: LogWriteError[] = [];
    const opening = LogWriter.open({ path, runId: 'run-a', onError: (e) => errors.push(e) });
    await expect(opening).rejects.toThrow(LogWriteError);
    await expect(opening).rejects.toThrow(`${path} already holds run run-b; pge never overwrites a log`);
    expect(errors).toHaveLength(1);
    expect(await readFile(path, 'utf8')).toBe(other);

    // The same through the constructor, which takes events before the file is checked.
    const { log, errors: reported } = writer(path);
    log.append(events[0]!);
    await expect(log.flushed()).rejects.toThrow('already holds run run-b');
    expect(reported).toHaveLength(1);
    expect(() => log.append(events[1]!)).toThrow(reported[0]);
    await expect(log.close()).rejects.toBe(reported[0]);
    expect(reported).toHaveLength(1);
    expect(await readFile(path, 'utf8')).toBe(other);
  });

  it('lets only one of two writers that start together on a new path have it', async () => {
    const path = join(dir, 'shared.md');
    const opened = await Promise.allSettled([
      LogWriter.open({ path, runId: 'run-a', onError: () => undefined }),
      LogWriter.open({ path, runId: 'run-b', onError: () => undefined }),
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

  it('continues a resumed run right after its log, removing the torn end of a write first', async () => {
    const path = join(dir, 'log.md');
    const kept = renderLog(events.slice(0, 10));
    await writeFile(path, `${kept}${renderLog(events.slice(10, 11)).slice(0, -10)}`);
    const errors: LogWriteError[] = [];
    const log = new LogWriter({ path, runId: 'run-a', continuesAt: 11, onError: (e) => errors.push(e) });
    for (const event of events.slice(10)) log.append(event);
    await log.close();
    expect(await readFile(path, 'utf8')).toBe(renderLog(events));
    expect(errors).toEqual([]);
  });

  it('refuses to continue a resumed run on a log that does not end right before it', async () => {
    const path = join(dir, 'log.md');
    const text = renderLog(events.slice(0, 12));
    await writeFile(path, text);
    const errors: LogWriteError[] = [];
    const log = new LogWriter({ path, runId: 'run-a', continuesAt: 11, onError: (e) => errors.push(e) });
    log.append(events[10]!);
    await expect(log.flushed()).rejects.toThrow(
      'ends at seq 12, but the resumed run continues at seq 11: the log changed after the resume read it',
    );
    expect(errors).toHaveLength(1);
    expect(await readFile(path, 'utf8')).toBe(text);
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

it('coalesces the events appended in one turn of the event loop into one write', async () => {
  const path = join(dir, 'log.md');
  const log = await LogWriter.open({ path, runId: 'run-a', onError: () => undefined });
  inline.writes = 0;
  for (const event of events) log.append(event);
  await log.flushed();
  await log.close();
  expect(inline.writes).toBe(1);
  expect(await readFile(path, 'utf8')).toBe(renderLog(events));
});

it('stops at the first failed write to a regular file', async () => {
  const path = join(dir, 'log.md');
  const { log, errors } = writer(path);
  log.append(events[0]!);
  await log.flushed();
  inline.failing = true;
  log.append(events[1]!);
  log.append(events[2]!);
  await expect(log.flushed()).rejects.toThrow(`cannot write ${path}: EIO`);
  expect(errors).toHaveLength(1);
  expect(() => log.append(events[3]!)).toThrow(errors[0]);
  await expect(log.close()).rejects.toBe(errors[0]);
  expect(await readFile(path, 'utf8')).toBe(renderLog(events.slice(0, 1)));
});
