import { describe, expect, it } from 'vitest';
import { BoundedMap } from '../../src/bounded-map.js';

describe('BoundedMap', () => {
  it('keeps at most its limit, forgetting the oldest insertion first', () => {
    const map = new BoundedMap<string, number>(3);
    for (const [i, key] of ['a', 'b', 'c', 'd', 'e'].entries()) map.set(key, i);
    expect(map.size).toBe(3);
    expect([map.get('a'), map.get('b'), map.get('c'), map.get('d'), map.get('e')]).toEqual([
      undefined,
      undefined,
      2,
      3,
      4,
    ]);
  });

  it('updates a key it holds without evicting anything', () => {
    const map = new BoundedMap<string, number>(2);
    map.set('a', 1).set('b', 2).set('a', 10);
    expect(map.size).toBe(2);
    expect(map.get('a')).toBe(10);
    expect(map.get('b')).toBe(2);
  });

  it('deletes and clears; after a clear it fills from empty again', () => {
    const map = new BoundedMap<string, number>(2);
    map.set('a', 1).set('b', 2);
    expect(map.delete('a')).toBe(true);
    expect(map.delete('a')).toBe(false);
    map.clear();
    expect(map.size).toBe(0);
    map.set('c', 3).set('d', 4);
    expect([map.get('c'), map.get('d')]).toEqual([3, 4]);
  });

  it('takes a limit of at least 1', () => {
    expect(() => new BoundedMap(0)).toThrow(RangeError);
    expect(() => new BoundedMap(1.5)).toThrow(RangeError);
  });
});
