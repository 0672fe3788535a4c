import { open, readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { readLog, readLogRunId } from '../persistence/index.js';
import type { RunEvent } from '../schemas/index.js';
import type { RunStore } from './run-store.js';

/**
 * Following a log file while its run writes it. The log is append-only, so the file is read again
 * whenever it grows and parsed whole with `readLog`, the same reader that resumes runs. A write
 * may be caught half done: then the longest prefix that parses is taken, and the rest waits for
 * the next poll. A log that still fails to parse once it has stopped changing is reported.
 */

/** Where a prefix may end: before an event marker or before a section or note heading. */
const CUT = /^(?:<!-- pge:event |#### |### \[|---$)/gm;
/** Bound on the prefixes tried per read; a torn tail needs one. */
const MAX_TRIES = 16;

/** The line a `readLog` error names (`<source>:<line>: …`), if it names one. */
function errorLine(error: unknown, source: string): number | null {
  const message = error instanceof Error ? error.message : '';
  if (!message.startsWith(`${source}:`)) return null;
  const line = /^(\d+):/.exec(message.slice(source.length + 1));
  return line ? Number(line[1]) : null;
}

/** The offset of the last cut point before `end`, at or before line `line` when one is given. */
function cutBefore(text: string, end: number, line: number | null): number {
  let limit = end - 1;
  if (line !== null) {
    let offset = 0;
    for (let n = 1; n < line && offset >= 0; n++) offset = text.indexOf('\n', offset) + 1 || -1;
    if (offset >= 0) limit = Math.min(limit, offset);
  }
  let cut = -1;
  for (const match of text.slice(0, end).matchAll(CUT)) if (match.index <= limit) cut = match.index;
  return cut;
}

/**
 * The events of the longest prefix of `text` that parses, and why the whole text did not. The
 * prefix ends before the section that holds the line `readLog` complained about: a torn tail is
 * one section, so one retry finds it; a damaged section stops the view there and is reported.
 */
export function parseLogPrefix(text: string, source = 'log'): { events: RunEvent[]; error: Error | null } {
  let error: Error | null = null;
  let end = text.length;
  for (let tries = 0; tries < MAX_TRIES && end > 0; tries++) {
    try {
      return { events: readLog(text.slice(0, end), source), error };
    } catch (caught) {
      error ??= caught as Error;
      end = cutBefore(text, end, errorLine(caught, source));
    }
  }
  return { events: [], error };
}

/** A log being followed. */
export interface LogFollower {
  /** Resolves after the first read (the file may not exist yet: then it is waited for). */
  readonly ready: Promise<void>;
  /** Stops polling; resolves once a read in progress has finished. */
  close(): Promise<void>;
}

/** Options of `followLog`. */
export interface FollowOptions {
  /** Milliseconds between checks of the file's size (default 250). */
  intervalMs?: number;
  /** Milliseconds a log may stay unparsable before that is reported as a problem (default 2000). */
  settleMs?: number;
}

/** Follows the log at `path` into `store` until closed. */
export function followLog(path: string, store: RunStore, options: FollowOptions = {}): LogFollower {
  const intervalMs = options.intervalMs ?? 250;
  let lastSize = -1;
  let lastMtime = -1;
  const settleMs = options.settleMs ?? 2_000;
  let failed: { text: string; since: number } | null = null;

  async function poll(): Promise<void> {
    let info: Awaited<ReturnType<typeof stat>>;
    try {
      info = await stat(path);
    } catch (error) {
      // Not there yet: a run about to start creates it. Anything else is worth saying.
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') store.problem(`${path}: ${String(error)}`);
      return;
    }
    if (info.size === lastSize && info.mtimeMs === lastMtime && failed === null) return;
    lastSize = info.size;
    lastMtime = info.mtimeMs;
    const text = await readFile(path, 'utf8');
    const { events, error } = parseLogPrefix(text, path);
    const runId = events[0]?.runId;
    if (runId) store.replace(runId, events);
    if (error === null) {
      failed = null;
    } else if (failed?.text !== text) {
      failed = { text, since: Date.now() };
    } else if (Date.now() - failed.since >= settleMs) {
      // The writer would have finished its write by now: the log is damaged, or not a pge log.
      store.problem(error.message);
    }
  }

  return everyInterval(intervalMs, poll, (error) => store.problem(`${path}: ${String(error)}`));
}

/**
 * Runs `step` now and every `intervalMs`, one run at a time, each failure told to `onError`, until
 * closed; `close` resolves once a run in progress has finished, then runs `onClose`.
 */
function everyInterval(
  intervalMs: number,
  step: () => Promise<void>,
  onError: (error: unknown) => void,
  onClose: () => Promise<unknown> = async () => {},
): LogFollower {
  let running: Promise<void> = Promise.resolve();
  let closed = false;
  const tick = () => {
    running = running.then(() => (closed ? undefined : step())).catch(onError);
    return running;
  };
  const ready = tick();
  const timer = setInterval(() => void tick(), intervalMs);
  return {
    ready,
    async close() {
      closed = true;
      clearInterval(timer);
      await running;
      await onClose();
    },
  };
}

/**
 * Follows every pge log directly in `dir` into `store` until closed: those there now and those a
 * run creates later (the directory is listed again every `intervalMs`), each with `followLog`. A
 * file that does not start like a pge log is passed over, and looked at again only once it has
 * grown (a log being created is empty for a moment).
 */
export function followLogDir(dir: string, store: RunStore, options: FollowOptions = {}): LogFollower {
  const intervalMs = options.intervalMs ?? 250;
  const followers = new Map<string, LogFollower>();
  /** Files that were not pge logs, by the size at which they were looked at. */
  const others = new Map<string, number>();

  async function scan(): Promise<void> {
    const names = (await readdir(dir, { withFileTypes: true }))
      .filter((entry) => entry.isFile() && entry.name.endsWith('.md'))
      .map((entry) => join(dir, entry.name));
    for (const path of names) {
      if (followers.has(path)) continue;
      const { size } = await stat(path);
      if (others.get(path) === size) continue;
      if (readLogRunId(await head(path)) === null) {
        others.set(path, size);
        continue;
      }
      others.delete(path);
      const follower = followLog(path, store, options);
      followers.set(path, follower);
      await follower.ready;
    }
  }

  return everyInterval(
    intervalMs,
    scan,
    (error) => store.problem(`${dir}: ${String(error)}`),
    () => Promise.all([...followers.values()].map((f) => f.close())),
  );
}

/** The first 4 KiB of a file, where a pge log names its run. */
async function head(path: string): Promise<string> {
  const file = await open(path, 'r');
  try {
    const { buffer, bytesRead } = await file.read(Buffer.alloc(4096), 0, 4096, 0);
    return buffer.subarray(0, bytesRead).toString('utf8');
  } finally {
    await file.close();
  }
}
