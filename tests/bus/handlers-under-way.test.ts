import { describe, expect, it } from 'vitest';
import { HandlersUnderWay } from '../../src/bus/handlers-under-way.js';

/** A promise settled from outside, standing for one handler under way. */
function handler(): { done: Promise<void>; end: () => void } {
  let end: () => void = () => undefined;
  const done = new Promise<void>((resolve) => {
    end = resolve;
  });
  return { done, end };
}

/** Lets every settled promise's reactions run. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('HandlersUnderWay', () => {
  it('counts the handlers under way until each settles', async () => {
    const handling = new HandlersUnderWay();
    const [a, b] = [handler(), handler()];
    handling.add(a.done);
    handling.add(b.done);
    expect(handling.size).toBe(2);
    a.end();
    await settle();
    expect(handling.size).toBe(1);
    b.end();
    await settle();
    expect(handling.size).toBe(0);
  });

  it('makes room only once fewer than the most are under way', async () => {
    const handling = new HandlersUnderWay();
    const [a, b, c] = [handler(), handler(), handler()];
    for (const h of [a, b, c]) handling.add(h.done);
    let roomAt: string | null = null;
    const room = handling.room(2).then(() => {
      roomAt = 'room';
    });
    await settle();
    expect(roomAt).toBeNull();
    a.end();
    await settle();
    expect(roomAt).toBeNull(); // 2 still under way: not fewer than 2
    c.end();
    await room;
    expect(roomAt).toBe('room');
    // With room already, it resolves at once.
    await handling.room(2);
    b.end();
  });

  it('has room at once when none is under way', async () => {
    await new HandlersUnderWay().room(1);
  });
});
