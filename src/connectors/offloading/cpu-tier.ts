/**
 * The CPU tier as a standalone KVTier (index + buffers in one object), so it passes the
 * same conformance suite as the fs and Redis tiers. The connector uses the two halves
 * separately: the index on the scheduler side, the buffers on the worker side.
 */
import type { EvictionPolicyName } from './config.ts';
import { CpuSlotBuffers } from './cpu-slot-buffers.ts';
import { CpuSlotIndex } from './cpu-slot-index.ts';
import { emptyTierStats, type KVTier, type TierEntry, type TierStats } from './kv-tier.ts';

export interface CpuTierOptions {
  capacityBytes: number;
  slotBytes: number;
  evictionPolicy?: EvictionPolicyName;
}

export class CpuTier implements KVTier {
  readonly kind = 'cpu' as const;
  readonly medium = 'CPU' as const;
  readonly timeoutMs = 0;
  readonly index: CpuSlotIndex;
  readonly buffers: CpuSlotBuffers;
  readonly #stats = emptyTierStats();
  #evicted: string[] = [];

  constructor(options: CpuTierOptions) {
    const numSlots = Math.floor(options.capacityBytes / options.slotBytes);
    this.index = new CpuSlotIndex(numSlots, options.evictionPolicy ?? 'lru');
    this.buffers = new CpuSlotBuffers(numSlots, options.slotBytes);
  }

  async putMany(entries: readonly TierEntry[]): Promise<string[]> {
    const stored: string[] = [];
    for (const { key, value } of entries) {
      if (value.byteLength > this.buffers.slotBytes) {
        this.#stats.errors++;
        continue;
      }
      if (this.index.has(key)) this.index.remove(key);
      const alloc = this.index.allocate(key);
      if (!alloc) continue;
      for (const e of alloc.evicted) {
        this.buffers.release(e.slot);
        this.#evicted.push(e.key);
        this.#stats.evictions++;
      }
      this.buffers.write(alloc.slot, value);
      this.index.markReady(key);
      this.#stats.puts++;
      this.#stats.putBytes += value.byteLength;
      stored.push(key);
    }
    return stored;
  }

  async getMany(keys: readonly string[]): Promise<(Uint8Array | null)[]> {
    return keys.map((key) => {
      this.#stats.gets++;
      const slot = this.index.peek(key);
      const bytes = slot === null ? null : this.buffers.read(slot);
      if (!bytes) return null;
      this.index.touch(key);
      this.#stats.hits++;
      this.#stats.getBytes += bytes.byteLength;
      return Uint8Array.prototype.slice.call(bytes);
    });
  }

  async hasMany(keys: readonly string[]): Promise<boolean[]> {
    return keys.map((k) => this.index.peek(k) !== null);
  }

  async deleteMany(keys: readonly string[]): Promise<void> {
    for (const k of keys) {
      const slot = this.index.remove(k);
      if (slot !== null) this.buffers.release(slot);
    }
  }

  stats(): TierStats {
    return { ...this.#stats };
  }

  takeEvicted(): string[] {
    const out = this.#evicted;
    this.#evicted = [];
    return out;
  }

  async close(): Promise<void> {
    await this.deleteMany(this.index.keys());
  }
}
