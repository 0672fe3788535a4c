import { describe, expect, it } from 'vitest';
import { publishEvent } from '../../src/bus/channels.js';
import { InProcessBus } from '../../src/bus/in-process-bus.js';
import { BusError } from '../../src/errors.js';
import { followRun } from '../../src/runtime/follow-run.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { freshRunId, runStarted, stepStarted } from '../bus/bus-contract.js';
import { fullRun } from '../persistence/fixtures.js';

/** Following a run from outside its coordinator, on the in-process bus: order, the end, and a stall. */

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

describe('followRun', () => {
  it('hands the events over by seq, once each, whatever order they come in, and resolves with the closing one', async () => {
    const bus = new InProcessBus();
    const runId = freshRunId();
    const events = fullRun(runId);
    const seen: RunEvent[] = [];
    const follower = followRun(bus, runId, { onEvent: (e) => seen.push(e), idleTimeoutMs: 5_000 });
    // The second half first, then the first, then a repeat: as a stream can hold them after an outage.
    const half = Math.floor(events.length / 2);
    for (const event of [...events.slice(half), ...events.slice(0, half), events[3]!])
      await publishEvent(bus, event);
    const closing = await follower.closing;
    expect(closing).toEqual(events.at(-1));
    expect(seen).toEqual(events);
    expect(follower.lastSeq()).toBe(events.length);
    await bus.close();
  });

  it('rejects with a BusError that says where the run stopped when no progress comes in time', async () => {
    const bus = new InProcessBus();
    const runId = freshRunId();
    const waiting = followRun(bus, runId, { idleTimeoutMs: 100 });
    await expect(waiting.closing).rejects.toThrow(
      new BusError(`no progress of run ${runId} for 100 ms before its first event`),
    );
    const other = freshRunId();
    const started = followRun(bus, other, { idleTimeoutMs: 300 });
    // Each event in order puts the deadline off; one that waits for a missing seq does not.
    for (let seq = 1; seq <= 3; seq++) {
      await publishEvent(bus, seq === 1 ? runStarted(other) : stepStarted(other, seq));
      await sleep(100);
    }
    await publishEvent(bus, stepStarted(other, 5));
    const error = await started.closing.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BusError);
    expect((error as Error).message).toBe(
      `no progress of run ${other} for 300 ms after event 3 (step.started)`,
    );
    expect(started.lastSeq()).toBe(3);
    expect(started.received()).toBe(4);
    await bus.close();
  });
});
