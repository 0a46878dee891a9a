/**
 * Adaptive Replacement Cache (Megiddo & Modha, FAST 2003). T1 holds keys seen once, T2 keys
 * seen at least twice; B1/B2 remember keys recently evicted from each. A hit in a ghost list
 * moves the target size `p` of T1 towards the list that would have kept the key, so the
 * cache adapts between recency and frequency. Pinned keys are skipped when choosing a victim.
 */
import type { EvictionPolicy, InsertResult } from './eviction-policy.ts';

type Lru = Map<string, true>;

function popLru(list: Lru): void {
  const first = list.keys().next();
  if (!first.done) list.delete(first.value);
}

function firstEvictable(list: Lru, canEvict: (key: string) => boolean): string | null {
  for (const key of list.keys()) if (canEvict(key)) return key;
  return null;
}

export class ArcPolicy implements EvictionPolicy {
  readonly name = 'arc' as const;
  readonly capacity: number;
  readonly t1: Lru = new Map();
  readonly t2: Lru = new Map();
  readonly b1: Lru = new Map();
  readonly b2: Lru = new Map();
  /** Target size of T1. */
  #p = 0;

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  get target(): number {
    return this.#p;
  }

  get size(): number {
    return this.t1.size + this.t2.size;
  }

  has(key: string): boolean {
    return this.t1.has(key) || this.t2.has(key);
  }

  touch(key: string): void {
    if (this.t1.delete(key) || this.t2.delete(key)) this.t2.set(key, true);
  }

  insert(key: string, canEvict: (key: string) => boolean): InsertResult {
    if (this.has(key)) {
      this.touch(key);
      return { inserted: true, evicted: [] };
    }
    const c = this.capacity;
    const inB1 = this.b1.has(key);
    const inB2 = this.b2.has(key);
    if (inB1) this.#p = Math.min(c, this.#p + Math.max(this.b2.size / this.b1.size, 1));
    else if (inB2) this.#p = Math.max(0, this.#p - Math.max(this.b1.size / this.b2.size, 1));
    else {
      // A key never seen: keep |T1|+|B1| <= c and the whole directory <= 2c.
      if (this.t1.size + this.b1.size >= c) {
        if (this.b1.size > 0) popLru(this.b1);
      } else if (this.t1.size + this.t2.size + this.b1.size + this.b2.size >= 2 * c) {
        popLru(this.b2);
      }
    }
    const evicted: string[] = [];
    while (this.size >= c) {
      const victim = this.#replace(inB2, canEvict);
      if (victim === null) return { inserted: false, evicted };
      evicted.push(victim);
    }
    this.b1.delete(key);
    this.b2.delete(key);
    (inB1 || inB2 ? this.t2 : this.t1).set(key, true);
    this.#trimGhosts();
    return { inserted: true, evicted };
  }

  remove(key: string): void {
    this.t1.delete(key);
    this.t2.delete(key);
    this.b1.delete(key);
    this.b2.delete(key);
  }

  clear(): void {
    for (const l of [this.t1, this.t2, this.b1, this.b2]) l.clear();
    this.#p = 0;
  }

  residentKeys(): string[] {
    return [...this.t1.keys(), ...this.t2.keys()];
  }

  /** ARC's REPLACE: evict from T1 when it is above its target, else from T2; into the ghost lists. */
  #replace(incomingInB2: boolean, canEvict: (key: string) => boolean): string | null {
    const preferT1 =
      this.t1.size > 0 && (this.t1.size > this.#p || (incomingInB2 && this.t1.size === this.#p));
    const fromT1 = firstEvictable(this.t1, canEvict);
    const fromT2 = firstEvictable(this.t2, canEvict);
    const useT1 = preferT1 ? fromT1 !== null : fromT2 === null && fromT1 !== null;
    if (useT1 && fromT1 !== null) {
      this.t1.delete(fromT1);
      this.b1.set(fromT1, true);
      return fromT1;
    }
    if (fromT2 !== null) {
      this.t2.delete(fromT2);
      this.b2.set(fromT2, true);
      return fromT2;
    }
    return null;
  }

  #trimGhosts(): void {
    while (this.b1.size > this.capacity) popLru(this.b1);
    while (this.b2.size > this.capacity) popLru(this.b2);
  }
}
