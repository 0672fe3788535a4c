import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { publishEvent, subscribeRejections } from '../../src/bus/channels.js';
import type { MessageRejection } from '../../src/bus/codec.js';
import { InProcessBus } from '../../src/bus/in-process-bus.js';
import type { LogWriteError } from '../../src/errors.js';
import { readLogFile, renderLog } from '../../src/persistence/index.js';
import { createPersistenceActor } from '../../src/persistence/persistence-actor.js';
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

/** What the actor reports on pge.errors.rejected from now on. */
function collectRejections(): MessageRejection[] {
  const rejections: MessageRejection[] = [];
  subscribeRejections(bus, (rejection) => void rejections.push(rejection));
  return rejections;
}

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

  it('closes a run after its closing event: redeliveries are ignored, later events reported as rejected', async () => {
    const a = fullRun('run-a', { logPath: join(dir, 'a.md') });
    const rejections = collectRejections();
    const actor = createPersistenceActor({ bus, onError });
    await publishAll(a);
    await bus.flush();
    await actor.flushed('run-a');
    await publishEvent(bus, a[5]!);
    await bus.flush();
    expect(rejections).toEqual([]);
    const late = makeEvent('run-a', 32, {
      type: 'step.passed',
      payload: { stepId: 's', stepNumber: 1, attempt: 1, bestAttempt: 1 },
    });
    await publishEvent(bus, late);
    await bus.flush();
    // The late event is in no log, and said so on pge.errors.rejected; the log still ends with the closing event.
    expect(rejections).toEqual([
      {
        subject: 'pge.run.run-a.evt.step.passed',
        problem: 'step.passed (seq 32) of run run-a came after its closing event (seq 31)',
        ts: expect.any(String),
      },
    ]);
    await actor.flushed('run-a');
    expect(await readFile(join(dir, 'a.md'), 'utf8')).toBe(renderLog(a));
    expect(errors).toEqual([]);
    await actor.close();
  });

  it('takes the first event of each seq: a closing event sent again for a written seq closes nothing', async () => {
    const a = fullRun('run-a', { logPath: join(dir, 'a.md') });
    const actor = createPersistenceActor({ bus, onError });
    await publishAll(a.slice(0, 20));
    await bus.flush();
    await actor.flushed('run-a');
    const closing = a.at(-1)!;
    await publishEvent(bus, { ...closing, id: 'forged', seq: 7 } as RunEvent);
    await publishAll(a.slice(20));
    await bus.flush();
    await actor.flushed('run-a');
    expect(await readFile(join(dir, 'a.md'), 'utf8')).toBe(renderLog(a));
    expect(errors).toEqual([]);
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

describe('the persistence actor reading a stream (history)', () => {
  /**
   * An actor that reads history from `stream` (a stand-in for PGE_EVENTS: what the transport
   * kept, in stored order), fed by `deliver`, which settles as a durable consumer's handler does.
   */
  function streamActor(stream: RunEvent[], gapWaitMs = 10_000, withOpening = false) {
    let handler: ((event: RunEvent) => void | Promise<void>) | null = null;
    const reads: string[] = [];
    const openings: string[] = [];
    const opening = async (runId: string) => {
      openings.push(runId);
      return stream.find((e) => e.runId === runId) ?? null;
    };
    const actor = createPersistenceActor({
      ...(withOpening ? { opening } : {}),
      bus,
      onError,
      gapWaitMs,
      subscribe: (h) => {
        handler = h;
        return { subject: 'pge.run.*.evt.>', queue: null, unsubscribe: () => undefined };
      },
      history: async (runId) => {
        reads.push(runId);
        return stream.filter((e) => e.runId === runId);
      },
    });
    return { actor, reads, openings, deliver: async (event: RunEvent) => handler!(event) };
  }

  /** The log an earlier process left: `events` delivered to an actor that then closed. */
  async function leftBy(events: RunEvent[]): Promise<void> {
    const earlier = streamActor(events);
    for (const event of events) await earlier.deliver(event);
    await earlier.actor.close();
  }

  it('with opening, joins a run whose log holds its start by its first event alone, reading no more', async () => {
    const a = fullRun('run-a', { logPath: join(dir, 'a.md') });
    await leftBy(a.slice(0, 8));
    const second = streamActor(a, 10_000, true);
    for (const event of a.slice(8)) await second.deliver(event);
    expect(second.openings).toEqual(['run-a']);
    expect(second.reads).toEqual([]);
    expect(await readFile(join(dir, 'a.md'), 'utf8')).toBe(renderLog(a));
    await second.actor.close();
    expect(errors).toEqual([]);
  });

  it("with opening, reads from the stream what a joined run's log lacks before the event delivered", async () => {
    const a = fullRun('run-a', { logPath: join(dir, 'a.md') });
    await leftBy(a.slice(0, 4));
    // Seq 5-8 were never written (the earlier worker died with them): the stream has them.
    const second = streamActor(a, 10_000, true);
    await second.deliver(a[8]!);
    // Settled: so the file holds everything up to it already (and what the stream held after it).
    expect((await readLogFile(join(dir, 'a.md'))).slice(0, 9)).toEqual(a.slice(0, 9));
    for (const event of a.slice(9)) await second.deliver(event);
    expect(second.openings).toEqual(['run-a']);
    expect(second.reads).toEqual(['run-a']);
    expect(await readFile(join(dir, 'a.md'), 'utf8')).toBe(renderLog(a));
    await second.actor.close();
    expect(errors).toEqual([]);
  });

  it('writes a run it joined midway from the start of the stream, and settles each event once on disk', async () => {
    const a = fullRun('run-a', { logPath: join(dir, 'a.md') });
    const { actor, deliver, reads } = streamActor(a);
    await deliver(a[12]!);
    // Settled: so the file holds everything up to it already.
    expect(await readLogFile(join(dir, 'a.md'))).toEqual(a);
    for (const event of a.slice(13)) await deliver(event);
    expect(reads).toEqual(['run-a']);
    expect(await readFile(join(dir, 'a.md'), 'utf8')).toBe(renderLog(a));
    await actor.close();
    expect(errors).toEqual([]);
  });

  it('goes on with a log an earlier process left, after its last event', async () => {
    const a = fullRun('run-a', { logPath: join(dir, 'a.md') });
    await leftBy(a.slice(0, 8));
    // The next process is handed seq 7 again (never acknowledged), then the rest.
    const second = streamActor(a);
    for (const event of a.slice(6)) await second.deliver(event);
    expect(await readFile(join(dir, 'a.md'), 'utf8')).toBe(renderLog(a));
    await second.actor.close();
    expect(errors).toEqual([]);
  });

  it('fills a seq gap from the stream', async () => {
    const a = fullRun('run-a', { logPath: join(dir, 'a.md') });
    const { actor, deliver } = streamActor(a);
    for (const event of a.filter((e) => e.seq !== 9)) await deliver(event);
    expect(await readFile(join(dir, 'a.md'), 'utf8')).toBe(renderLog(a));
    await actor.close();
    expect(errors).toEqual([]);
  });

  it('reports an orphan event on pge.errors.rejected and settles it, leaving no log', async () => {
    const rejections = collectRejections();
    const orphan = fullRun('run-z', { logPath: join(dir, 'z.md') })[3]!;
    const { actor, deliver } = streamActor([orphan]);
    await deliver(orphan);
    await bus.flush();
    expect(rejections).toEqual([
      {
        subject: `pge.run.run-z.evt.${orphan.type}`,
        problem: `${orphan.type} (seq 4) of run run-z cannot be placed: the run has no run.started (no run of that id was started)`,
        ts: expect.any(String),
      },
    ]);
    await expect(readFile(join(dir, 'z.md'))).rejects.toThrow('ENOENT');
    // A run whose start is stored after all (a late publish) is written whole, the refused event too.
    const z = fullRun('run-z', { logPath: join(dir, 'z.md') });
    const late = streamActor([orphan, ...z]);
    await late.deliver(orphan);
    await actor.close();
    for (const event of z) await late.deliver(event);
    expect(await readLogFile(join(dir, 'z.md'))).toEqual(z);
    await late.actor.close();
    expect(errors).toEqual([]);
  });

  it('holds the events after a gap the stream cannot fill, then fails the log and reports them', async () => {
    const rejections = collectRejections();
    const a = fullRun('run-a', { logPath: join(dir, 'a.md') });
    const stream = a.filter((e) => e.seq !== 9);
    const { actor, deliver } = streamActor(stream, 50);
    // Each delivery settles although seq 9 is missing: nothing waits on the gap.
    for (const event of stream.slice(0, 10)) await deliver(event);
    expect((await readLogFile(join(dir, 'a.md'))).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    await new Promise((resolve) => setTimeout(resolve, 150));
    expect(errors.map(([runId, e]) => [runId, e.message])).toEqual([
      ['run-a', 'seq 9 of run run-a never reached the stream within 50 ms; 22 later events are in no log'],
    ]);
    await bus.flush();
    expect(rejections.map((r) => r.problem)).toContain(
      `${a[9]!.type} (seq 10) of run run-a cannot be placed: seq 9 never reached the stream within 50 ms`,
    );
    await expect(actor.flushed('run-a')).rejects.toThrow('seq 9 of run run-a never reached the stream');
    await actor.close();
  });
});
