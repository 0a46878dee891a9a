/**
 * Asynchronous existence checks against the secondary tiers for the scheduler, whose
 * hooks are synchronous: the first question starts the I/O in the background and answers
 * "unknown"; later questions read the answer. A check that has not answered by its
 * deadline counts as a miss, so a slow tier delays admission by at most the bound.
 */
import type { KVTier } from './kv-tier.ts';

/** Where a key was found: the index of the first (allowed) tier that has it, or -1. */
export type TierLocation = number;

/** Which tiers a caller may load from (all when omitted). */
export type TierAllowed = (tier: number) => boolean;

interface Pending {
  deadline: number;
  done: boolean;
}

export class SecondaryLookup {
  readonly tiers: readonly KVTier[];
  readonly boundMs: number;
  /** Key → the tiers that hold it, in tier order. */
  readonly #found = new Map<string, number[]>();
  readonly #pending = new Map<string, Pending>();
  readonly #maxEntries: number;
  lookups = 0;

  constructor(tiers: readonly KVTier[], boundMs: number, maxEntries = 100_000) {
    this.tiers = tiers;
    this.boundMs = boundMs;
    this.#maxEntries = maxEntries;
  }

  /** The known location, 'unknown' while the check runs (it starts one if needed). */
  locate(key: string, now = Date.now(), allowed?: TierAllowed): TierLocation | 'unknown' {
    const known = this.#found.get(key);
    if (known !== undefined) return known.find((t) => allowed?.(t) ?? true) ?? -1;
    const p = this.#pending.get(key);
    if (p) return p.done || now >= p.deadline ? -1 : 'unknown';
    this.#start([key], now);
    return 'unknown';
  }

  /** Starts checks for several keys in one batch (one pipelined round trip per tier). */
  prefetch(keys: readonly string[], now = Date.now()): void {
    const missing = keys.filter((k) => !this.#found.has(k) && !this.#pending.has(k));
    if (missing.length > 0) this.#start(missing, now);
  }

  /** Forget what is known about keys (they were stored, evicted or failed to load). */
  forget(keys: readonly string[]): void {
    for (const k of keys) {
      this.#found.delete(k);
      this.#pending.delete(k);
    }
  }

  clear(): void {
    this.#found.clear();
    this.#pending.clear();
  }

  #start(keys: string[], now: number): void {
    this.lookups++;
    const state: Pending = { deadline: now + this.boundMs, done: false };
    for (const k of keys) this.#pending.set(k, state);
    void this.#check(keys).then((where) => {
      state.done = true;
      keys.forEach((k, i) => {
        if (this.#pending.get(k) !== state) return;
        this.#pending.delete(k);
        this.#found.set(k, where[i] ?? []);
      });
      while (this.#found.size > this.#maxEntries) {
        const oldest = this.#found.keys().next();
        if (oldest.done) break;
        this.#found.delete(oldest.value);
      }
    });
  }

  /**
   * Per key, every tier that holds it. Each tier is asked once, for all keys, in one batch;
   * every tier is asked (a request may be barred from some), so they are asked at once.
   */
  async #check(keys: string[]): Promise<number[][]> {
    const has = await Promise.all(this.tiers.map((tier) => tier.hasMany(keys)));
    return keys.map((_, i) => has.flatMap((h, t) => (h[i] ? [t] : [])));
  }
}
