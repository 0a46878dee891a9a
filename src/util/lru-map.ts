/** A bounded map in least-recently-used order (Map keeps insertion order). */
export class LruMap<K, V> {
  #capacity: number;
  readonly #map = new Map<K, V>();

  constructor(capacity: number) {
    this.#capacity = Math.max(1, capacity);
  }

  get size(): number {
    return this.#map.size;
  }

  /** Most entries held (at least 1); lowering it evicts the least recently used at once. */
  get capacity(): number {
    return this.#capacity;
  }

  set capacity(capacity: number) {
    this.#capacity = Math.max(1, capacity);
    this.#evict();
  }

  /** The value, now the most recently used. */
  get(key: K): V | undefined {
    const value = this.#map.get(key);
    if (value === undefined) return undefined;
    this.#map.delete(key);
    this.#map.set(key, value);
    return value;
  }

  set(key: K, value: V): void {
    this.#map.delete(key);
    this.#map.set(key, value);
    this.#evict();
  }

  has(key: K): boolean {
    return this.#map.has(key);
  }

  delete(key: K): boolean {
    return this.#map.delete(key);
  }

  #evict(): void {
    while (this.#map.size > this.#capacity) {
      const oldest = this.#map.keys().next();
      if (oldest.done) break;
      this.#map.delete(oldest.value);
    }
  }
}
