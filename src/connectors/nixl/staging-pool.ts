/**
 * A bounded staging region for heterogeneous-TP reads: remote blocks (a different size from
 * local ones) land here, checksummed by the transfer agent, before their head slices are
 * copied into the local KV blocks. Slots are handed out first-come first-served; a request
 * that does not fit waits until earlier ones release theirs, so memory stays at the cap.
 */
import { KVError } from '../../errors/kv-error.ts';
import type { TransferAgent } from '../../transfer/index.ts';

interface Waiter {
  readonly need: number;
  readonly resolve: (slots: number[]) => void;
}

export class StagingPool {
  readonly regionId: number;
  readonly blockBytes: number;
  readonly capacity: number;
  readonly bytes: Uint8Array;
  /** Free slot ids, ascending, so a request's slots form few contiguous runs. */
  #free: number[];
  readonly #waiters: Waiter[] = [];

  constructor(agent: TransferAgent, regionId: number, blockBytes: number, capacity: number) {
    this.regionId = regionId;
    this.blockBytes = blockBytes;
    this.capacity = capacity;
    // Shared, so a transfer agent hosted in a worker thread can fill it in place.
    this.bytes = new Uint8Array(new SharedArrayBuffer(blockBytes * capacity));
    this.#free = Array.from({ length: capacity }, (_, i) => i);
    agent.registerMemory([{ id: regionId, bytes: this.bytes, blockBytes, numBlocks: capacity }]);
  }

  get freeSlots(): number {
    return this.#free.length;
  }

  /** Resolves with `need` slot ids once they are free (in request order). */
  acquire(need: number): Promise<number[]> {
    if (need > this.capacity) {
      return Promise.reject(
        new KVError(
          'NIXL_STAGING_TOO_SMALL',
          `a heterogeneous-TP read needs ${need} staging blocks, the staging region has ${this.capacity}`,
          {
            hint: 'Staging holds one request of max_model_len tokens: give the decode engine a max_model_len at least as large as the prefill engine’s.',
          },
        ),
      );
    }
    if (this.#waiters.length === 0 && this.#free.length >= need) return Promise.resolve(this.#take(need));
    return new Promise((resolve) => this.#waiters.push({ need, resolve }));
  }

  release(slots: readonly number[]): void {
    if (slots.length === 0) return;
    this.#free = [...this.#free, ...slots].sort((a, b) => a - b);
    while (this.#waiters.length > 0 && this.#free.length >= this.#waiters[0]!.need) {
      const w = this.#waiters.shift()!;
      w.resolve(this.#take(w.need));
    }
  }

  /** Byte offset of a slot inside `bytes`. */
  offsetOf(slot: number): number {
    return slot * this.blockBytes;
  }

  #take(need: number): number[] {
    return this.#free.splice(0, need);
  }
}
