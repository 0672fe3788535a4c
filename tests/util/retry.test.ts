import { getEventListeners } from 'node:events';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { backoffMs, JITTER, pacer, pauseMs, retry } from '../../src/retry.js';

const PAUSES = { firstMs: 250, maxMs: 2_000 };

/** An attempt that fails `failures` times with `error`, then resolves 'done'; it notes when each began. */
function flaky(failures: number, error: unknown = new Error('not yet')) {
  const at: number[] = [];
  const attempt = async () => {
    at.push(performance.now());
    if (at.length <= failures) throw error;
    return 'done';
  };
  return { attempt, at };
}

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance', 'Date'] });
});

afterEach(() => {
  vi.useRealTimers();
  vi.restoreAllMocks();
});

describe('backoffMs', () => {
  it('doubles from the first pause and stops at the longest', () => {
    vi.spyOn(Math, 'random').mockReturnValue(0);
    expect([0, 1, 2, 3, 4, 20].map((retry) => backoffMs(retry, PAUSES))).toEqual([
      250, 500, 1_000, 2_000, 2_000, 2_000,
    ]);
  });

  it('takes at most a quarter off a pause at random, and never adds to it', () => {
    vi.spyOn(Math, 'random').mockReturnValue(0.999_999);
    expect(JITTER).toBe(0.25);
    for (const retry of [0, 2, 5]) {
      const most = Math.min(250 * 2 ** retry, 2_000);
      expect(backoffMs(retry, PAUSES)).toBeGreaterThanOrEqual(most * 0.75);
      expect(backoffMs(retry, PAUSES)).toBeLessThan(most * 0.751);
    }
    vi.spyOn(Math, 'random').mockReturnValue(0.5);
    expect(backoffMs(1, PAUSES)).toBe(500 * 0.875);
  });
});

describe('pauseMs', () => {
  it('is the wait a failure asks for, else the backoff; null for a failure not retried', () => {
    vi.spyOn(Math, 'random').mockReturnValue(0);
    const asking = new Error('busy');
    const policy = {
      ...PAUSES,
      retryable: (error: unknown) => error instanceof Error,
      askedMs: (error: unknown) => (error === asking ? 7_000 : null),
    };
    expect(pauseMs(asking, 0, policy)).toBe(7_000);
    expect(pauseMs(new Error('down'), 2, policy)).toBe(1_000);
    expect(pauseMs('not an error', 0, policy)).toBeNull();
    expect(pauseMs(asking, 0, { ...policy, askedMs: () => -5 })).toBe(0);
  });
});

describe('retry', () => {
  it('tries again after growing pauses until an attempt resolves', async () => {
    vi.spyOn(Math, 'random').mockReturnValue(0);
    const { attempt, at } = flaky(4);
    const numbers: number[] = [];
    const done = retry((n) => {
      numbers.push(n);
      return attempt();
    }, PAUSES);
    await vi.runAllTimersAsync();
    await expect(done).resolves.toBe('done');
    expect(at).toEqual([0, 250, 750, 1_750, 3_750]);
    expect(numbers).toEqual([1, 2, 3, 4, 5]);
  });

  it('tries until the deadline, the last pause cut to end at it, and gives up with the attempts made', async () => {
    vi.spyOn(Math, 'random').mockReturnValue(0);
    const failure = new Error('unanswered');
    const { attempt, at } = flaky(Number.POSITIVE_INFINITY, failure);
    const giveUp = vi.fn(
      (error: unknown, attempts: number) => new Error(`gave up after ${attempts}`, { cause: error }),
    );
    const done = retry(attempt, { ...PAUSES, deadline: performance.now() + 1_000, giveUp }).catch(
      (e: unknown) => e,
    );
    await vi.runAllTimersAsync();
    const error = (await done) as Error;
    // 0, 250, 750, then the 1 s pause is cut to end at the deadline: a failure there is final.
    expect(at).toEqual([0, 250, 750, 1_000]);
    expect(error.message).toBe('gave up after 4');
    expect(error.cause).toBe(failure);
    expect(giveUp).toHaveBeenCalledTimes(1);
  });

  it('keeps trying until the deadline however much jitter shortens the pauses', async () => {
    vi.spyOn(Math, 'random').mockReturnValue(0.999_999);
    const { attempt, at } = flaky(Number.POSITIVE_INFINITY);
    const done = retry(attempt, { ...PAUSES, deadline: performance.now() + 1_000 }).catch((e: unknown) => e);
    await vi.runAllTimersAsync();
    expect(((await done) as Error).message).toBe('not yet');
    expect(at.at(-1)).toBe(1_000);
  });

  it('stops after maxRetries retries', async () => {
    const { attempt, at } = flaky(Number.POSITIVE_INFINITY);
    const giveUp = vi.fn((error: unknown) => error);
    const done = retry(attempt, { ...PAUSES, maxRetries: 2, giveUp }).catch((e: unknown) => e);
    await vi.runAllTimersAsync();
    expect(((await done) as Error).message).toBe('not yet');
    expect(at).toHaveLength(3);
    expect(giveUp).toHaveBeenCalledWith(expect.any(Error), 3);
  });

  it('throws a failure it does not retry at once, through giveUp when given', async () => {
    const refused = new Error('forbidden');
    const bare = flaky(1, refused);
    await expect(retry(bare.attempt, { ...PAUSES, retryable: () => false })).rejects.toBe(refused);
    expect(bare.at).toEqual([0]);

    const mapped = flaky(1, refused);
    const giveUp = vi.fn((_error: unknown, attempts: number) => new Error(`refused after ${attempts}`));
    await expect(retry(mapped.attempt, { ...PAUSES, retryable: () => false, giveUp })).rejects.toThrow(
      'refused after 1',
    );
    expect(vi.getTimerCount()).toBe(0);
  });

  it('waits what the failure asks for instead of the backoff', async () => {
    const { attempt, at } = flaky(1);
    const done = retry(attempt, { ...PAUSES, askedMs: () => 30_000 });
    await vi.runAllTimersAsync();
    await expect(done).resolves.toBe('done');
    expect(at).toEqual([0, 30_000]);
  });

  it('ends a pause when its signal aborts, with the reason, and tries no more', async () => {
    const controller = new AbortController();
    const reason = new Error('run cancelled');
    const { attempt, at } = flaky(Number.POSITIVE_INFINITY);
    const done = retry(attempt, { ...PAUSES, signal: controller.signal }).catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(100);
    controller.abort(reason);
    await expect(done).resolves.toBe(reason);
    expect(at).toEqual([0]);
    expect(performance.now()).toBe(100);
    expect(vi.getTimerCount()).toBe(0);
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
  });

  it('makes no attempt once its signal has aborted', async () => {
    const reason = new Error('too late');
    const { attempt, at } = flaky(0);
    await expect(retry(attempt, { ...PAUSES, signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    expect(at).toEqual([]);
  });

  it('leaves no listener on a signal that outlives it', async () => {
    const controller = new AbortController();
    const { attempt } = flaky(3);
    const done = retry(attempt, { ...PAUSES, signal: controller.signal });
    await vi.runAllTimersAsync();
    await expect(done).resolves.toBe('done');
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
  });
});

describe('pacer', () => {
  it('waits the next pause of the backoff at each call, and rejects with the reason on abort', async () => {
    vi.spyOn(Math, 'random').mockReturnValue(0);
    const controller = new AbortController();
    const wait = pacer({ firstMs: 5, maxMs: 100 }, controller.signal);
    const ends: number[] = [];
    for (let i = 0; i < 7; i++) {
      const waited = wait();
      await vi.runAllTimersAsync();
      await waited;
      ends.push(performance.now());
    }
    expect(ends).toEqual([5, 15, 35, 75, 155, 255, 355]);
    const reason = new Error('stop');
    const waiting = wait().catch((e: unknown) => e);
    controller.abort(reason);
    await expect(waiting).resolves.toBe(reason);
  });
});
