import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { raceAbort } from '../../src/race-abort.js';

describe('raceAbort', () => {
  it('settles as the call does, and leaves no listener on the signal', async () => {
    const controller = new AbortController();
    await expect(raceAbort(Promise.resolve('done'), controller.signal)).resolves.toBe('done');
    await expect(raceAbort(Promise.reject(new Error('broke')), controller.signal)).rejects.toThrow('broke');
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
  });

  it('rejects with the reason as soon as the signal aborts, though the call never settles', async () => {
    const controller = new AbortController();
    const reason = new Error('run stopped');
    const raced = raceAbort(new Promise<never>(() => {}), controller.signal);
    controller.abort(reason);
    await expect(raced).rejects.toBe(reason);
  });

  it('rejects at once for a signal aborted already', async () => {
    const reason = new Error('too late');
    await expect(raceAbort(new Promise<never>(() => {}), AbortSignal.abort(reason))).rejects.toBe(reason);
  });
});

describe('raceAbort with a call that fails after its signal aborted', () => {
  it('leaves no unhandled rejection behind (the call rejects with the same abort)', async () => {
    const reason = new Error('cancelled');
    const unhandled: unknown[] = [];
    const onUnhandled = (error: unknown) => unhandled.push(error);
    process.on('unhandledRejection', onUnhandled);
    try {
      const call = new Promise<never>((_, reject) => setTimeout(() => reject(reason), 5));
      await expect(raceAbort(call, AbortSignal.abort(reason))).rejects.toBe(reason);
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});
