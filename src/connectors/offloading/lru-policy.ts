/** Least-recently-used eviction: a Map keeps insertion order, a touch re-inserts. */
import type { EvictionPolicy, InsertResult } from './eviction-policy.ts';

export class LruPolicy implements EvictionPolicy {
  readonly name = 'lru' as const;
  readonly capacity: number;
  readonly #order = new Map<string, true>();

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  get size(): number {
    return this.#order.size;
  }

  has(key: string): boolean {
    return this.#order.has(key);
  }

  touch(key: string): void {
    if (!this.#order.delete(key)) return;
    this.#order.set(key, true);
  }

  insert(key: string, canEvict: (key: string) => boolean): InsertResult {
    if (this.#order.has(key)) {
      this.touch(key);
      return { inserted: true, evicted: [] };
    }
    const evicted: string[] = [];
    while (this.#order.size >= this.capacity) {
      const victim = this.#firstEvictable(canEvict);
      if (victim === null) return { inserted: false, evicted };
      this.#order.delete(victim);
      evicted.push(victim);
    }
    this.#order.set(key, true);
    return { inserted: true, evicted };
  }

  remove(key: string): void {
    this.#order.delete(key);
  }

  clear(): void {
    this.#order.clear();
  }

  residentKeys(): string[] {
    return [...this.#order.keys()];
  }

  #firstEvictable(canEvict: (key: string) => boolean): string | null {
    for (const key of this.#order.keys()) if (canEvict(key)) return key;
    return null;
  }
}
