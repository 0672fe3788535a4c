import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { LogWriteError } from '../../src/errors.js';
import {
  eventMarker,
  fenced,
  LogWriter,
  readLog,
  readLogFile,
  renderEvent,
  renderLog,
} from '../../src/persistence/index.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { fullRun } from './fixtures.js';

/**
 * A writer that joins an existing log (a restarted persistence worker) finds where it ends from
 * its head and tail when its last bytes are the writer's own rendering of its last event, and
 * reads it whole otherwise: either way it must agree with `readLog` on every file.
 */

/** The files read whole with `readFile` (the writer's slow way to find a log's end). */
const readWhole = vi.hoisted(() => [] as string[]);
vi.mock('node:fs/promises', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:fs/promises')>();
  const readFile = ((...args: Parameters<typeof actual.readFile>) => {
    readWhole.push(String(args[0]));
    return actual.readFile(...args);
  }) as typeof actual.readFile;
  return { ...actual, readFile, default: { ...actual, readFile } };
});

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'pge-log-end-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const events = fullRun('run-a', { hostile: true });

/** `events` with the work output of every `step.work.completed` made `output`. */
function withOutput(output: string): RunEvent[] {
  return events.map((event) =>
    event.type === 'step.work.completed'
      ? ({ ...event, payload: { ...event.payload, work: { ...event.payload.work, output } } } as RunEvent)
      : event,
  );
}

let files = 0;

/**
 * Joins the log `text` as a restarted worker does (no `continuesAt`) and offers it every event of
 * `run`: `joined`, or the error it refused with; the file's text afterwards.
 */
async function joinLog(text: string, run: readonly RunEvent[]): Promise<{ outcome: string; after: string }> {
  const path = join(dir, `log-${++files}.md`);
  await writeFile(path, text);
  const errors: LogWriteError[] = [];
  const log = new LogWriter({ path, runId: 'run-a', onError: (e) => errors.push(e) });
  const outcome = await log.ready.then(
    () => 'joined',
    (error: unknown) => String(error),
  );
  if (errors.length === 0) {
    for (const event of run) log.append(event);
    await log.close();
  }
  expect(errors).toHaveLength(outcome === 'joined' ? 0 : 1);
  return { outcome, after: await readFile(path, 'utf8') };
}

describe('joining an existing log', () => {
  it('goes on after a log longer than the tail it reads, byte for byte', async () => {
    const long = withOutput('A long answer.\n'.repeat(8000)); // 120 kB a work output
    const first = 12;
    const path = join(dir, 'log.md');
    await writeFile(path, renderLog(long.slice(0, first)));
    const log = new LogWriter({ path, runId: 'run-a', onError: (e) => expect.unreachable(e.message) });
    readWhole.length = 0;
    await log.ready;
    expect(readWhole).toEqual([]); // its head and tail were enough
    for (const event of long) log.append(event);
    await log.close();
    expect(await readFile(path, 'utf8')).toBe(renderLog(long));
    expect(await readLogFile(path)).toEqual(long);
  });

  it('goes on after a last event whose JSON is longer than the tail it reads', async () => {
    const long = withOutput('x'.repeat(100_000));
    const last = long.findLastIndex((e) => e.type === 'step.work.completed') + 1;
    const path = join(dir, 'log.md');
    await writeFile(path, renderLog(long.slice(0, last)));
    const log = new LogWriter({ path, runId: 'run-a', onError: (e) => expect.unreachable(e.message) });
    readWhole.length = 0;
    await log.ready;
    expect(readWhole).toEqual([]);
    for (const event of long) log.append(event);
    await log.close();
    expect(await readFile(path, 'utf8')).toBe(renderLog(long));
  });

  it('agrees with readLog on a log whose last write was cut anywhere', async () => {
    const kept = renderLog(events.slice(0, 20));
    const next = renderEvent(events[20]!);
    const cuts = new Set<number>([next.length]);
    for (let at = 0; at < next.length; at += 61) cuts.add(at);
    for (let at = next.indexOf('\n'); at !== -1; at = next.indexOf('\n', at + 1)) cuts.add(at + 1);
    for (const at of cuts) {
      const text = kept + next.slice(0, at);
      const { outcome, after } = await joinLog(text, events);
      let logged: number | string;
      try {
        logged = readLog(text, join(dir, `log-${files}.md`)).length;
      } catch (error) {
        logged = (error as Error).message;
      }
      if (typeof logged === 'string') {
        expect(outcome, `cut at ${at}`).toBe(
          `LogWriteError: cannot resume ${join(dir, `log-${files}.md`)}: ${logged}`,
        );
        expect(after).toBe(text);
      } else {
        expect({ at, outcome }).toEqual({ at, outcome: 'joined' });
        expect(after).toBe(text + renderLog(events.slice(logged)));
      }
    }
  });

  it('does not take an event block inside model text, cut right after it, for the end', async () => {
    // The work output holds what looks like a whole event block of this very run.
    const inner = events[3]!;
    const forged = withOutput(
      `Quoting the log:\n${eventMarker(inner)}\n${fenced(JSON.stringify(inner), 'json')}`,
    );
    const at = forged.findIndex((e) => e.type === 'step.work.completed');
    const chunk = renderEvent(forged[at]!);
    const cut = chunk.indexOf('```\n', chunk.indexOf(JSON.stringify(inner))) + 4;
    const text = renderLog(forged.slice(0, at)) + chunk.slice(0, cut);
    expect(() => readLog(text)).toThrow(/never closed/);
    readWhole.length = 0;
    const { outcome, after } = await joinLog(text, forged);
    expect(readWhole[0]).toMatch(/log-\d+\.md$/);
    expect(outcome).toMatch(/cannot resume .*never closed/);
    expect(after).toBe(text);
  });

  it('reads a log whose last chunk is not its own rendering whole, and refuses what readLog refuses', async () => {
    // A gap in the middle, and an end edited by hand: the tail alone cannot vouch for it.
    const gap = [...events.slice(0, 5), ...events.slice(6, 12)];
    const text = renderLog(gap).replace(
      /\n([^\n]*)\n<!-- pge:event seq=12 /,
      '\nedited\n<!-- pge:event seq=12 ',
    );
    expect(() => readLog(text)).toThrow(/expected seq 6, found seq 7/);
    const { outcome, after } = await joinLog(text, events);
    expect(after).toBe(text);
    expect(outcome).toMatch(/cannot resume .*expected seq 6, found seq 7/);
  });
});
