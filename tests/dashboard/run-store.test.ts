import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { readLog } from '../../src/persistence/index.js';
import type { RunEvent } from '../../src/schemas/index.js';

/**
 * The run store when replaying a run's charts goes wrong: the run is still listed, a listener that
 * throws does not stop the others, and a page waits for a replay that hangs no longer than it asked.
 * The replay is mocked here; active-state.test.ts tests the real one.
 */

const replay = vi.hoisted(() => ({ impl: null as null | (() => Promise<unknown>) }));
vi.mock('../../src/dashboard/active-state.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../src/dashboard/active-state.js')>();
  return {
    ...real,
    replayActiveStates: (events: readonly RunEvent[]) =>
      replay.impl ? replay.impl() : real.replayActiveStates(events),
  };
});
const { RunStore } = await import('../../src/dashboard/run-store.js');

const events = readLog(readFileSync(join(import.meta.dirname, '../fixtures/logs/demo-run.md'), 'utf8'));

afterEach(() => {
  replay.impl = null;
});

describe('the run store', () => {
  it('lists a run whose charts cannot be replayed, without states, and says why', async () => {
    replay.impl = () => Promise.reject(new Error('replay broke'));
    const store = new RunStore({ replayDelayMs: 1 });
    store.replace(events[0]!.runId, events);
    await store.settled();
    expect(store.list().map((r) => r.runId)).toEqual([events[0]!.runId]);
    expect(store.view(events[0]!.runId)?.active).toBeNull();
    expect(store.problems.join('\n')).toMatch(/where its charts stand cannot be told: Error: replay broke/);
  });

  it('tells every listener though one throws, and leaves no unhandled rejection', async () => {
    const store = new RunStore({ replayDelayMs: 1 });
    const told: (string | null)[] = [];
    const errors = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    store.subscribe(() => {
      throw new Error('listener broke');
    });
    store.subscribe((runId) => told.push(runId));
    store.replace(events[0]!.runId, events);
    await store.settled();
    expect(told).toContain(events[0]!.runId);
    expect(errors).toHaveBeenCalledWith('pge dashboard: a run store listener failed:', expect.any(Error));
    errors.mockRestore();
  });

  it('answers a wait bounded by maxWaitMs though a replay hangs', async () => {
    replay.impl = () => new Promise(() => {});
    const store = new RunStore({ replayDelayMs: 1 });
    store.replace(events[0]!.runId, events);
    const started = Date.now();
    await store.settled(100);
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(store.list()).toEqual([]);
  });
});
