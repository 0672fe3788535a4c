import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { isClosingEvent, RunEvent } from '../schemas/index.js';
import { LOG_TITLE, RUN_ID_PREFIX } from './markdown-log.js';

/**
 * Reading the shared-state log back. Only the event blocks count: a line
 * `<!-- pge:event seq=<n> type=<type> -->` outside any fenced block, followed at once by a
 * fenced `json` block holding the event. Fences are tracked as CommonMark does, so a marker,
 * heading or fence inside model text (which the writer always fences) is just text here.
 */

/**
 * A line outside fences, or a whole fenced block (`closed` false when the text ends inside it);
 * `end` is the offset just past it and its line break.
 */
type Token =
  | { kind: 'line'; text: string; line: number; end: number }
  | { kind: 'fence'; info: string; body: string[]; line: number; closed: boolean; end: number };

interface Fence {
  char: string;
  length: number;
  info: string;
}

/** A fence opener: up to 3 spaces, then 3+ backticks or tildes; a backtick fence's info has no backtick. */
function openingFence(line: string): Fence | null {
  let i = 0;
  while (i < 3 && line.charCodeAt(i) === 32) i++;
  const char = line[i];
  if (char !== '`' && char !== '~') return null;
  let j = i;
  while (line[j] === char) j++;
  if (j - i < 3) return null;
  const info = line.slice(j).trim();
  if (char === '`' && info.includes('`')) return null;
  return { char, length: j - i, info };
}

/** A fence closes only on a run of its own character at least as long, with nothing after it. */
function closesFence(line: string, fence: Fence): boolean {
  let i = 0;
  while (i < 3 && line.charCodeAt(i) === 32) i++;
  let j = i;
  while (line[j] === fence.char) j++;
  return j - i >= fence.length && line.slice(j).trim() === '';
}

/** Splits on every CommonMark line ending (`\r\n`, `\r`, `\n`); line numbers start at 1. */
function* tokens(text: string): Generator<Token> {
  const lineBreak = /\r\n|\r|\n/g;
  let open: Extract<Token, { kind: 'fence' }> | null = null;
  let fence: Fence | null = null;
  let start = 0;
  for (let number = 1; start <= text.length; number++) {
    lineBreak.lastIndex = start;
    const found = lineBreak.exec(text);
    const line = text.slice(start, found ? found.index : text.length);
    const end = found ? found.index + found[0].length : text.length;
    start = found ? end : text.length + 1;
    if (open !== null && fence !== null) {
      open.end = end;
      if (closesFence(line, fence)) {
        open.closed = true;
        yield open;
        open = null;
        fence = null;
      } else {
        open.body.push(line);
      }
      continue;
    }
    fence = openingFence(line);
    if (fence !== null)
      open = { kind: 'fence', info: fence.info, body: [], line: number, closed: false, end };
    else yield { kind: 'line', text: line, line: number, end };
  }
  if (open !== null) yield open;
}

const MARKER = /^<!-- pge:event seq=(\d+) type=([a-z.]+) -->$/;

/** Thrown inside `scan` to stop at the first problem. */
class Stop {
  constructor(readonly error: Error) {}
}

/** A log read up to its first problem: the events before it, where the last one ends, and the problem. */
interface Scan {
  events: RunEvent[];
  /** Offset just past the last complete event's block (0 before the first). */
  end: number;
  problem: Error | null;
}

function scan(text: string, source: string): Scan {
  const events: RunEvent[] = [];
  let end = 0;
  const fail = (line: number, message: string, cause?: unknown): never => {
    throw new Stop(new Error(`${source}:${line}: ${message}`, cause === undefined ? undefined : { cause }));
  };
  try {
    let marker: { seq: number; type: string; line: number } | null = null;
    for (const token of tokens(text)) {
      if (marker !== null) {
        if (token.kind !== 'fence' || token.info !== 'json') {
          fail(marker.line, 'event marker is not followed by a json block');
        } else {
          if (!token.closed) fail(token.line, 'event block is never closed (a torn write?)');
          events.push(parseEvent(token.body.join('\n'), marker, events, fail));
          end = token.end;
        }
        marker = null;
        continue;
      }
      if (token.kind === 'fence') {
        if (!token.closed) fail(token.line, 'fenced block is never closed (a torn write?)');
        continue;
      }
      if (!token.text.startsWith('<!-- pge:event')) continue;
      const match = MARKER.exec(token.text);
      if (match === null) fail(token.line, `malformed event marker: ${token.text}`);
      else marker = { seq: Number(match[1]), type: match[2]!, line: token.line };
    }
    if (marker !== null) fail(marker.line, 'event marker at the end of the log has no json block');
  } catch (error) {
    if (error instanceof Stop) return { events, end, problem: error.error };
    throw error;
  }
  return { events, end, problem: null };
}

/**
 * Parses a log into its exact event sequence. Throws an error naming the line when a marker has
 * no JSON block, a block is torn or fails the `RunEvent` schema, a marker disagrees with its event,
 * seq is not 1..n without gaps, the events belong to more than one run, or an event follows the
 * run's closing event (`run.completed`, `run.failed`), which ends every log that has one.
 */
export function readLog(text: string, source = 'log'): RunEvent[] {
  const { events, problem } = scan(text, source);
  if (problem !== null) throw problem;
  return events;
}

/**
 * Reads a log whose last write a crash may have cut short (a power loss, a kill in the middle of a
 * large write): its complete events, and `end`, the length of the text to keep. When the text
 * after the last complete event does not parse (an event block never closed, a marker without its
 * block, JSON that never became whole) and holds at most one event marker (a write is cut once, so
 * at most one event in it is incomplete), it is the torn end of a write: `end` is where it starts.
 * Otherwise `end` is the text's length: text that parses as text (a section whose event was never
 * written) stays, and anything else wrong is thrown as `readLog` throws it.
 */
export function readLogTail(text: string, source = 'log'): { events: RunEvent[]; end: number } {
  const { events, end, problem } = scan(text, source);
  if (problem === null) return { events, end: text.length };
  if ((text.slice(end).match(/^<!-- pge:event/gm)?.length ?? 0) > 1) throw problem;
  return { events, end };
}

function parseEvent(
  json: string,
  marker: { seq: number; type: string; line: number },
  before: readonly RunEvent[],
  fail: (line: number, message: string, cause?: unknown) => never,
): RunEvent {
  const at = marker.line + 1;
  let data: unknown;
  try {
    data = JSON.parse(json);
  } catch (error) {
    return fail(at, `event block is not valid JSON: ${(error as Error).message}`, error);
  }
  const parsed = RunEvent.safeParse(data);
  if (!parsed.success)
    return fail(at, `not a valid run event:\n${z.prettifyError(parsed.error)}`, parsed.error);
  const event = parsed.data;
  if (event.seq !== marker.seq || event.type !== marker.type) {
    fail(
      at,
      `marker says seq=${marker.seq} type=${marker.type} but the event is seq=${event.seq} type=${event.type}`,
    );
  }
  const last = before.at(-1);
  if (last !== undefined && isClosingEvent(last)) {
    fail(
      at,
      `${event.type} (seq ${event.seq}) comes after the run's closing event ${last.type} (seq ${last.seq})`,
    );
  }
  if (event.seq !== before.length + 1) fail(at, `expected seq ${before.length + 1}, found seq ${event.seq}`);
  const runId = before[0]?.runId ?? event.runId;
  if (event.runId !== runId) fail(at, `event of run ${event.runId} in the log of run ${runId}`);
  return event;
}

/** Reads and parses a log file; errors name the file and line. */
export async function readLogFile(path: string): Promise<RunEvent[]> {
  return readLog(await readFile(path, 'utf8'), path);
}

/**
 * The section headings outside fenced blocks, in order: lines starting `# `, `## ` or `### [`.
 * This is what a reader of the log sees as its structure, so tests use it to prove that model
 * text cannot forge a section.
 */
export function logHeadings(text: string): string[] {
  const headings: string[] = [];
  for (const token of tokens(text)) {
    if (token.kind !== 'line') continue;
    const t = token.text;
    if (t.startsWith('### [') || t.startsWith('# ') || t.startsWith('## ')) headings.push(t);
  }
  return headings;
}

/**
 * The run a log belongs to, from its header (`# PGE Harness Shared State` then `**Run ID**: …`
 * within the first lines), or null when the text does not start like a pge log.
 */
export function readLogRunId(text: string): string | null {
  const head = text.slice(0, 4096).split(/\r\n|\r|\n/, 8);
  if (head[0] !== LOG_TITLE) return null;
  const line = head.find((l) => l.startsWith(RUN_ID_PREFIX));
  return line === undefined ? null : line.slice(RUN_ID_PREFIX.length).trim();
}
