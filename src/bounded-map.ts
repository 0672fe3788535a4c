/**
 * A map that keeps at most `limit` entries and forgets the oldest insertion first (a `Map` keeps
 * insertion order): for caches and memories that must not grow with every run a long-lived
 * process handles.
 */
export class BoundedMap<K, V> {
  readonly limit: number;
  readonly #map = new Map<K, V>();

  constructor(limit: number) {
    if (!Number.isInteger(limit) || limit < 1)
      throw new RangeError(`a BoundedMap holds at least 1 entry, not ${limit}`);
    this.limit = limit;
  }

  get size(): number {
    return this.#map.size;
  }

  get(key: K): V | undefined {
    return this.#map.get(key);
  }

  set(key: K, value: V): this {
    if (!this.#map.has(key) && this.#map.size >= this.limit) {
      const oldest = this.#map.keys().next();
      if (!oldest.done) this.#map.delete(oldest.value);
    }
    this.#map.set(key, value);
    return this;
  }

  delete(key: K): boolean {
    return this.#map.delete(key);
  }

  clear(): void {
    this.#map.clear();
  }
}
