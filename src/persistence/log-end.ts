import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { type FileHandle, readFile } from 'node:fs/promises';
import { LogWriteError } from '../errors.js';
import { RunEvent } from '../schemas/index.js';
import { readLog, readLogRunId, readLogTail } from './log-reader.js';
import { renderEvent } from './markdown-log.js';

/** Where an existing log ends, as the writer that goes on with it needs to know. */
export interface LogEnd {
  /** The last complete event in the log; null when it holds none (a device, or no event yet). */
  last: RunEvent | null;
  /** The length in bytes to cut the file to (the torn end of a write), or null to keep it whole. */
  keep: number | null;
  /** False for a device or pipe (`/dev/stdout`, say), which holds no earlier run. */
  regularFile: boolean;
}

/** What `findLogEnd` needs. */
export interface LogEndOptions {
  path: string;
  /** The run the log must belong to. */
  runId: string;
  /** A resumed run's log: a torn end is cut (`readLogTail`) rather than refused. */
  resumed: boolean;
}

/** The head that names the run (`readLogRunId` looks this far). */
const HEAD_BYTES = 4096;
/** The tail read first: more than one event's chunk in most logs, and the whole of small ones. */
const TAIL_BYTES = 64 * 1024;

const message = (error: unknown): string => (error instanceof Error ? error.message : String(error));

/**
 * Where the existing file at `path` (opened for appending as `handle`) ends: nothing for a device
 * or pipe, the last event of this run's own log, or a `LogWriteError` for any other file (empty,
 * not a pge log, another run's, or one that does not read back).
 *
 * A log that a worker joins is usually a whole one that an earlier worker wrote, so it is not
 * parsed: when its header names this run and its last bytes are exactly `renderEvent` of the event
 * in its last JSON block (what the writer appends, chunk after chunk, in seq order from 1), it
 * ends at that event; only its head and tail are read. Anything else (a torn end, a log of an
 * earlier rendering, another file) is read whole and parsed as before, and so is a resumed run's
 * log, whose torn end is cut. Readers (`readLog`) still check every event of a log.
 */
export async function findLogEnd(handle: FileHandle, options: LogEndOptions): Promise<LogEnd> {
  const { path, runId, resumed } = options;
  // Synchronous, like the writer's appends: a stat and two short reads of a local file cost less
  // than the thread pool's hand-off, and a restarted worker opens hundreds of logs at once.
  const stat = fstatSync(handle.fd);
  // A device or pipe (/dev/stdout, say) holds no earlier run: write from the start.
  if (!stat.isFile()) return { last: null, keep: null, regularFile: false };
  // Empty but already there: another writer has just created it, or someone left it; either way
  // it is not this run's log to resume.
  if (stat.size === 0)
    throw new LogWriteError(
      `${path} already exists (empty): another writer may hold it; pge never shares a log`,
    );
  if (!resumed) {
    let last: RunEvent | null = null;
    try {
      last = lastRenderedEvent(path, stat.size, runId);
    } catch {
      // read whole below
    }
    if (last !== null) return { last, keep: null, regularFile: true };
  }
  return readWholeLog(path, runId, resumed);
}

/** The log read whole and parsed: every event checked, a resumed run's torn end found. */
async function readWholeLog(path: string, runId: string, resumed: boolean): Promise<LogEnd> {
  const text = await readFile(path, 'utf8');
  const owner = readLogRunId(text);
  if (owner === null)
    throw new LogWriteError(`${path} exists and is not a pge log; pge never overwrites a file`);
  if (owner !== runId)
    throw new LogWriteError(`${path} already holds run ${owner}; pge never overwrites a log`);
  try {
    const { events, end } = resumed
      ? readLogTail(text, path)
      : { events: readLog(text, path), end: text.length };
    return {
      last: events.at(-1) ?? null,
      keep: end < text.length ? Buffer.byteLength(text.slice(0, end)) : null,
      regularFile: true,
    };
  } catch (error) {
    throw new LogWriteError(`cannot resume ${path}: ${message(error)}`, { cause: error });
  }
}

/**
 * The event whose chunk the file of `size` bytes ends with, byte for byte, if its header names
 * `runId`; else null. Only the head and the tail are read (the tail again, longer, when the last
 * chunk does not fit in `TAIL_BYTES`).
 */
function lastRenderedEvent(path: string, size: number, runId: string): RunEvent | null {
  const file = openSync(path, 'r');
  try {
    let tail = readAt(file, Math.max(0, size - TAIL_BYTES), Math.min(size, TAIL_BYTES));
    const head = tail.length === size ? tail : readAt(file, 0, Math.min(size, HEAD_BYTES));
    if (readLogRunId(head.subarray(0, HEAD_BYTES).toString('utf8')) !== runId) return null;
    let event = eventAtEnd(tail.toString('utf8'));
    if (event === null && tail.length < size) {
      // The last JSON line is longer than the tail read: read the whole file.
      tail = readAt(file, 0, size);
      event = eventAtEnd(tail.toString('utf8'));
    }
    if (event === null || event.runId !== runId) return null;
    const chunk = Buffer.from(renderEvent(event), 'utf8');
    if (chunk.length > size) return null;
    if (chunk.length > tail.length) tail = readAt(file, size - chunk.length, chunk.length);
    return tail.subarray(tail.length - chunk.length).equals(chunk) ? event : null;
  } finally {
    closeSync(file);
  }
}

/** A run of three or more backticks, the whole line: the fences the writer puts around JSON. */
const FENCE = /^`{3,}$/;

/**
 * The event in the JSON block that `text` ends with (an opening fence with info `json`, one line
 * of JSON, the same fence, a line break), validated against `RunEvent`; null when it does not end
 * so. The marker and the section before the block are checked by comparing the rendered chunk.
 */
function eventAtEnd(text: string): RunEvent | null {
  if (!text.endsWith('\n')) return null;
  const closing = text.lastIndexOf('\n', text.length - 2) + 1;
  const fence = text.slice(closing, -1);
  if (closing === 0 || !FENCE.test(fence)) return null;
  const json = text.lastIndexOf('\n', closing - 2) + 1;
  const opening = text.lastIndexOf('\n', json - 2) + 1;
  if (json === 0 || opening === 0 || text.slice(opening, json - 1) !== `${fence}json`) return null;
  let data: unknown;
  try {
    data = JSON.parse(text.slice(json, closing - 1));
  } catch {
    return null;
  }
  const parsed = RunEvent.safeParse(data);
  return parsed.success ? parsed.data : null;
}

/** `length` bytes of `file` from `position` (fewer if it ends sooner). */
function readAt(fd: number, position: number, length: number): Buffer {
  const buffer = Buffer.allocUnsafe(length);
  let read = 0;
  while (read < length) {
    const bytesRead = readSync(fd, buffer, read, length - read, position + read);
    if (bytesRead === 0) break;
    read += bytesRead;
  }
  return buffer.subarray(0, read);
}
