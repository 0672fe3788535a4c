import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPersistenceActor } from '../../src/actors/persistence-actor.js';
import { publishEvent } from '../../src/bus/channels.js';
import { InProcessBus } from '../../src/bus/in-process-bus.js';
import type { LogWriteError } from '../../src/errors.js';
import { readLogFile, renderLog } from '../../src/persistence/index.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { fullRun, makeEvent } from './fixtures.js';

let dir: string;
let bus: InProcessBus;
const errors: [string, LogWriteError][] = [];
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'pge-actor-'));
  bus = new InProcessBus();
  errors.length = 0;
});
afterEach(async () => {
  await bus.close();
  await rm(dir, { recursive: true, force: true });
});

const onError = (runId: string, error: LogWriteError): void => {
  errors.push([runId, error]);
};

async function publishAll(list: readonly RunEvent[]): Promise<void> {
  for (const event of list) await publishEvent(bus, event);
}

/** Two lists merged one from each in turn, as two concurrent runs publish. */
function interleave<T>(a: readonly T[], b: readonly T[]): T[] {
  const out: T[] = [];
  for (let i = 0; i < Math.max(a.length, b.length); i++) out.push(...a.slice(i, i + 1), ...b.slice(i, i + 1));
  return out;
}

describe('the persistence actor', () => {
  it('writes two concurrent runs to two files, each in seq order', async () => {
    const a = fullRun('run-a', { logPath: join(dir, 'a.md') });
    const b = fullRun('run-b', { logPath: join(dir, 'b.md') });
    const actor = createPersistenceActor({ bus, onError });
    // Run b's first events arrive before its run.started and must wait for it.
    await publishAll(interleave(a, [b[2]!, b[1]!, b[0]!, ...b.slice(3)]));
    await bus.flush();
    await Promise.all([actor.flushed('run-a'), actor.flushed('run-b')]);
    expect(await readFile(join(dir, 'a.md'), 'utf8')).toBe(renderLog(a));
    expect(await readLogFile(join(dir, 'b.md'))).toEqual(b);
    await actor.close();
    expect(errors).toEqual([]);
  });

  it('keeps a run open after its terminal event until the events before it have arrived', async () => {
    const a = fullRun('run-a', { logPath: join(dir, 'a.md') });
    const actor = createPersistenceActor({ bus, onError });
    await publishAll([...a.slice(0, 29), a[30]!]);
    await bus.flush();
    const done = actor.flushed('run-a');
    await publishEvent(bus, a[29]!);
    await bus.flush();
    await done;
    expect(await readFile(join(dir, 'a.md'), 'utf8')).toBe(renderLog(a));
    await actor.close();
    expect(errors).toEqual([]);
  });

  it('lets resolvePath choose the file', async () => {
    const a = fullRun('run-a', { logPath: join(dir, 'ignored.md') });
    const actor = createPersistenceActor({
      bus,
      onError,
      resolvePath: (e) => join(dir, `custom-${e.runId}.md`),
    });
    await publishAll(a);
    await bus.flush();
    await actor.flushed('run-a');
    expect(await readLogFile(join(dir, 'custom-run-a.md'))).toEqual(a);
    await expect(readFile(join(dir, 'ignored.md'))).rejects.toThrow();
    await actor.close();
  });

  it("opens a resumed run's log at its run.resumed, and continues it", async () => {
    const path = join(dir, 'a.md');
    const a = fullRun('run-a', { logPath: join(dir, 'moved-away.md') });
    const resumed = makeEvent('run-a', 21, {
      type: 'run.resumed',
      payload: { owner: 'host:1', fromSeq: 20, logPath: path, repeated: [], pausedMs: 5, discardedBytes: 0 },
    });
    const after = a.slice(20).map((e) => ({ ...e, seq: e.seq + 1, id: `run-a-${e.seq + 1}` }) as RunEvent);
    await writeFile(path, renderLog(a.slice(0, 20)));
    const actor = createPersistenceActor({ bus, onError });
    // The events after the resume may come before it: they wait for the event that names the file.
    await publishAll([after[0]!, resumed, ...after.slice(1)]);
    await bus.flush();
    await actor.flushed('run-a');
    expect(await readLogFile(path)).toEqual([...a.slice(0, 20), resumed, ...after]);
    await actor.close();
    expect(errors).toEqual([]);
  });

  it('waits in flushed() for events that are not on disk yet', async () => {
    const a = fullRun('run-a', { logPath: join(dir, 'a.md') });
    const actor = createPersistenceActor({ bus, onError });
    await publishAll(a.slice(0, 20));
    await bus.flush();
    await actor.flushed('run-a');
    expect(await readLogFile(join(dir, 'a.md'))).toEqual(a.slice(0, 20));
    await actor.close();
  });

  it('closes a run after its terminal event: redeliveries are ignored, later events reported', async () => {
    const a = fullRun('run-a', { logPath: join(dir, 'a.md') });
    const actor = createPersistenceActor({ bus, onError });
    await publishAll(a);
    await bus.flush();
    await actor.flushed('run-a');
    await publishEvent(bus, a[5]!);
    await bus.flush();
    expect(errors).toEqual([]);
    const late = makeEvent('run-a', 32, {
      type: 'step.passed',
      payload: { stepId: 's', stepNumber: 1, attempt: 1, bestAttempt: 1 },
    });
    await publishEvent(bus, late);
    await bus.flush();
    // The late event is in no log, so the run's log is not complete: flushed() says so.
    await expect(actor.flushed('run-a')).rejects.toThrow('came after its terminal event');
    expect(await readFile(join(dir, 'a.md'), 'utf8')).toBe(renderLog(a));
    expect(errors.map(([runId, e]) => [runId, e.message])).toEqual([
      ['run-a', 'step.passed (seq 32) of run run-a came after its terminal event'],
    ]);
    await actor.close();
  });

  it('reports a run whose log cannot be written, and keeps writing the others', async () => {
    await writeFile(join(dir, 'file'), 'x');
    const a = fullRun('run-a', { logPath: join(dir, 'file', 'a.md') });
    const b = fullRun('run-b', { logPath: join(dir, 'b.md') });
    const actor = createPersistenceActor({ bus, onError });
    await publishAll(interleave(a, b));
    await bus.flush();
    await expect(actor.flushed('run-a')).rejects.toThrow(/cannot open .*a\.md/);
    await actor.flushed('run-b');
    expect(await readLogFile(join(dir, 'b.md'))).toEqual(b);
    expect(errors.map(([runId]) => runId)).toEqual(['run-a']);
    await actor.close();
  });

  it('reports a resolvePath that throws as a log failure of that run', async () => {
    const a = fullRun('run-a', { logPath: join(dir, 'a.md') });
    const actor = createPersistenceActor({
      bus,
      onError,
      resolvePath: () => {
        throw new Error('no working directory');
      },
    });
    await publishAll(a.slice(0, 3));
    await bus.flush();
    await expect(actor.flushed('run-a')).rejects.toThrow(
      'cannot choose the log of run run-a: Error: no working directory',
    );
    expect(errors).toHaveLength(1);
    await actor.close();
  });

  it('reports, on close, events of a run whose run.started never came', async () => {
    const a = fullRun('run-a', { logPath: join(dir, 'a.md') });
    const actor = createPersistenceActor({ bus, onError });
    await publishAll(a.slice(1, 4));
    await bus.flush();
    const waiting = actor.flushed('run-a');
    await actor.close();
    await expect(waiting).rejects.toThrow('3 events of run run-a arrived without its run.started');
    expect(errors).toHaveLength(1);
  });
});
