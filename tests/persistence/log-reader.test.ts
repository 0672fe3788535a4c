import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  eventMarker,
  logHeadings,
  readLog,
  readLogFile,
  readLogRunId,
  readLogTail,
  renderEvent,
  renderLog,
} from '../../src/persistence/index.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { fullRun } from './fixtures.js';

const events = fullRun('run-a');
const text = renderLog(events);
/** The 1-based line number of the first line of `text` that equals `line`. */
const lineOf = (source: string, line: string): number => source.split('\n').indexOf(line) + 1;

describe('readLog', () => {
  it('reads the run id from the header, and nothing from other files', () => {
    expect(readLogRunId(text)).toBe('run-a');
    expect(readLogRunId('# My notes\n\n**Run ID**: run-a\n')).toBeNull();
  });

  it('ignores markers inside tilde fences as well as backtick fences', () => {
    const fake = renderEvent(events[1]!);
    const inTilde = `${renderEvent(events[0]!)}\n~~~~\n${fake}~~~~\n`;
    const inBackticks = `${renderEvent(events[0]!)}\n\`\`\`\`\`\`\`\`\`\`\n${fake}\`\`\`\`\`\`\`\`\`\`\n`;
    expect(readLog(inTilde)).toEqual(events.slice(0, 1));
    expect(readLog(inBackticks)).toEqual(events.slice(0, 1));
    expect(logHeadings(`~~~\n### [STEP 9 EVALUATION] (x)\n~~~\n### [STEP 1 WORK LOG] (y)\n`)).toEqual([
      '### [STEP 1 WORK LOG] (y)',
    ]);
  });

  it('closes a fence only on a run of its own character at least as long', () => {
    // Neither `~~~` nor a shorter backtick run closes the four-backtick fence, so the marker stays inside it.
    const log = `${renderEvent(events[0]!)}\`\`\`\`\n~~~~\n\`\`\`\n${renderEvent(events[1]!)}\`\`\`\`\n`;
    expect(readLog(log)).toEqual(events.slice(0, 1));
  });

  it('rejects a gap in seq, naming the line', () => {
    const gapped = renderLog([events[0]!, events[2]!]);
    const line = lineOf(gapped, eventMarker(events[2]!)) + 1;
    expect(() => readLog(gapped)).toThrow(`log:${line}: expected seq 2, found seq 3`);
  });

  it('rejects events of two runs in one log', () => {
    const other = fullRun('run-b');
    expect(() => readLog(renderLog([events[0]!, other[1]!]))).toThrow(
      /:\d+: event of run run-b in the log of run run-a/,
    );
  });

  it('rejects an event after the closing event, naming the line', () => {
    const closing = events.at(-1)!;
    const after = { ...events[4]!, seq: closing.seq + 1 } as RunEvent;
    const log = renderLog([...events, after]);
    const line = lineOf(log, eventMarker(after)) + 1;
    expect(() => readLog(log)).toThrow(
      `log:${line}: ${after.type} (seq ${after.seq}) comes after the run's closing event ${closing.type} (seq ${closing.seq})`,
    );
  });

  it('reads the complete events of a log whose last write was torn, and where they end', () => {
    const kept = renderLog(events.slice(0, 5));
    const next = renderEvent(events[5]!);
    // Torn inside the next event's fenced text, its JSON, or before its block closes: cut.
    for (const at of [next.indexOf('```') + 5, next.lastIndexOf('{') + 2, next.length - 3]) {
      expect(readLogTail(kept + next.slice(0, at))).toEqual({ events: events.slice(0, 5), end: kept.length });
    }
    // Text that parses as text (a section without its event yet) is kept; so is a whole log.
    const section = next.slice(0, next.indexOf('<!--'));
    expect(readLogTail(kept + section)).toEqual({ events: events.slice(0, 5), end: (kept + section).length });
    expect(readLogTail(text)).toEqual({ events, end: text.length });
  });

  it('does not take damage with whole events after it for a torn write', () => {
    const damaged = text.replace(`"seq":3,`, '"seq":3,"x":1,');
    expect(() => readLog(damaged)).toThrow(/not a valid run event/);
    expect(() => readLogTail(damaged)).toThrow(/not a valid run event/);
    // The last event damaged is indistinguishable from a torn write: it is the one cut.
    const last = renderLog(events.slice(0, -1));
    const lastDamaged =
      text.slice(0, last.length) + renderEvent(events.at(-1)!).replace('"seq"', '"x":1,"seq"');
    expect(readLogTail(lastDamaged)).toEqual({ events: events.slice(0, -1), end: last.length });
  });

  it('rejects a torn tail', () => {
    expect(() => readLog(text.slice(0, -20))).toThrow(/:\d+: event block is never closed/);
  });

  it('rejects a marker without its JSON block', () => {
    const broken = `${renderEvent(events[0]!)}\n${eventMarker(events[1]!)}\n\nsome text\n`;
    expect(() => readLog(broken)).toThrow(
      `log:${lineOf(broken, eventMarker(events[1]!))}: event marker is not followed by a json block`,
    );
  });

  it('rejects an event that fails the schema, or disagrees with its marker', () => {
    const invalid = text.replace('"maxSteps":5,"maxRetriesPerStep"', '"maxSteps":0,"maxRetriesPerStep"');
    expect(() => readLog(invalid)).toThrow(/log:\d+: not a valid run event/);
    const mislabelled = text.replace(
      '<!-- pge:event seq=2 type=plan.requested -->',
      '<!-- pge:event seq=2 type=plan.created -->',
    );
    expect(() => readLog(mislabelled)).toThrow(
      /marker says seq=2 type=plan.created but the event is seq=2 type=plan.requested/,
    );
  });

  describe('readLogFile', () => {
    let dir: string;
    beforeEach(async () => {
      dir = await mkdtemp(join(tmpdir(), 'pge-reader-'));
    });
    afterEach(async () => {
      await rm(dir, { recursive: true, force: true });
    });

    it('reads a file back, and names the file in errors', async () => {
      const path = join(dir, 'log.md');
      await writeFile(path, text);
      expect(await readLogFile(path)).toEqual(events);
      await writeFile(path, text.slice(0, -20));
      await expect(readLogFile(path)).rejects.toThrow(`${path}:`);
    });
  });
});
