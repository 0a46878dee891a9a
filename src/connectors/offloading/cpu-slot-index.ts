/**
 * Which offloaded chunk sits in which CPU slot (scheduler side; the bytes live in the
 * worker's CpuSlotBuffers). A new entry is pending until the worker has written it, and
 * pinned entries (being loaded or promoted) are never evicted.
 */
import { createEvictionPolicy, type EvictionPolicy } from './eviction-policy.ts';
import type { PluginClass } from './plugin-module.ts';

interface SlotEntry {
  slot: number;
  ready: boolean;
  pins: number;
}

export interface SlotAllocation {
  slot: number;
  evicted: { key: string; slot: number }[];
}

export class CpuSlotIndex {
  readonly numSlots: number;
  readonly policy: EvictionPolicy;
  readonly #entries = new Map<string, SlotEntry>();
  readonly #free: number[] = [];

  constructor(numSlots: number, policyName: string, policyClass: PluginClass | null = null) {
    this.numSlots = numSlots;
    this.policy = createEvictionPolicy(policyName, Math.max(1, numSlots), policyClass);
    for (let s = numSlots - 1; s >= 0; s--) this.#free.push(s);
  }

  get size(): number {
    return this.#entries.size;
  }

  /** The slot of a readable entry, without counting it as a hit. */
  peek(key: string): number | null {
    const e = this.#entries.get(key);
    return e?.ready ? e.slot : null;
  }

  has(key: string): boolean {
    return this.#entries.has(key);
  }

  isReady(key: string): boolean {
    return this.#entries.get(key)?.ready === true;
  }

  touch(key: string): void {
    if (this.#entries.has(key)) this.policy.touch(key);
  }

  /** A slot for a new key (pending), evicting unpinned ready entries as needed; null when full. */
  allocate(key: string): SlotAllocation | null {
    if (this.numSlots === 0 || this.#entries.has(key)) return null;
    const canEvict = (k: string): boolean => {
      const e = this.#entries.get(k);
      return e?.ready === true && e.pins === 0;
    };
    const result = this.policy.insert(key, canEvict);
    const evicted: { key: string; slot: number }[] = [];
    for (const k of result.evicted) {
      const e = this.#entries.get(k);
      if (!e) continue;
      this.#entries.delete(k);
      this.#free.push(e.slot);
      evicted.push({ key: k, slot: e.slot });
    }
    if (!result.inserted) return null;
    const slot = this.#free.pop();
    if (slot === undefined) {
      this.policy.remove(key);
      return null;
    }
    this.#entries.set(key, { slot, ready: false, pins: 0 });
    return { slot, evicted };
  }

  markReady(key: string): void {
    const e = this.#entries.get(key);
    if (e) e.ready = true;
  }

  pin(key: string): void {
    const e = this.#entries.get(key);
    if (e) e.pins++;
  }

  unpin(key: string): void {
    const e = this.#entries.get(key);
    if (e && e.pins > 0) e.pins--;
  }

  /** Drops an entry (failed write, corrupt data). Returns its slot. */
  remove(key: string): number | null {
    const e = this.#entries.get(key);
    if (!e) return null;
    this.#entries.delete(key);
    this.policy.remove(key);
    this.#free.push(e.slot);
    return e.slot;
  }

  /** Drops every unpinned entry; returns the dropped keys. */
  clear(): string[] {
    const dropped: string[] = [];
    for (const [key, e] of [...this.#entries]) {
      if (e.pins > 0) continue;
      this.remove(key);
      dropped.push(key);
    }
    return dropped;
  }

  /** Entries that cannot be evicted now: not written yet, or pinned. */
  numBusy(): number {
    let n = 0;
    for (const e of this.#entries.values()) if (!e.ready || e.pins > 0) n++;
    return n;
  }

  keys(): string[] {
    return [...this.#entries.keys()];
  }
}
