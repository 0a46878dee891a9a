/**
 * Which KV blocks each backend holds, learnt from its KV events: block hash → how many
 * copies (stores minus removals, over every medium and group), per backend; plus, for a
 * while, the blocks of prompts just routed there (pending: their events come after the
 * prefill). A backend that restarts (its publisher's sequence resets), clears its cache
 * (AllBlocksCleared) or stops answering health checks starts again from nothing.
 */
import type { KVEventBatch } from '../kv-events/wire.ts';

export class KvBlockIndex {
  readonly #blocks = new Map<string, Map<bigint, number>>();
  /** Per backend: block hash → until when it counts as held although not reported yet. */
  readonly #pending = new Map<string, Map<bigint, number>>();
  #marked = 0;

  apply(backend: string, batch: KVEventBatch): void {
    let blocks = this.#blocks.get(backend);
    if (!blocks) {
      blocks = new Map();
      this.#blocks.set(backend, blocks);
    }
    for (const e of batch.events) {
      if (e.type === 'AllBlocksCleared') blocks.clear();
      else if (e.type === 'BlockStored')
        for (const h of e.blockHashes) blocks.set(h, (blocks.get(h) ?? 0) + 1);
      else {
        for (const h of e.blockHashes) {
          const n = (blocks.get(h) ?? 0) - 1;
          if (n > 0) blocks.set(h, n);
          else blocks.delete(h);
        }
      }
    }
  }

  clear(backend: string): void {
    this.#blocks.delete(backend);
    this.#pending.delete(backend);
  }

  /** `hashes` count as held by `backend` until `until` (a request routed there, still computing). */
  markPending(backend: string, hashes: readonly bigint[], until: number): void {
    let pending = this.#pending.get(backend);
    if (!pending) {
      pending = new Map();
      this.#pending.set(backend, pending);
    }
    for (const h of hashes) pending.set(h, until);
    // Sweep expired entries now and then, so the map holds only what is still pending.
    if (++this.#marked % 256 === 0) {
      const now = Date.now();
      for (const p of this.#pending.values()) for (const [h, t] of p) if (t <= now) p.delete(h);
    }
  }

  /** How many of `hashes`, from the first on, `backend` holds (reported, or pending at `now`). */
  prefixLength(backend: string, hashes: readonly bigint[], now = Date.now()): number {
    const blocks = this.#blocks.get(backend);
    const pending = this.#pending.get(backend);
    let n = 0;
    while (n < hashes.length && (blocks?.has(hashes[n]!) || (pending?.get(hashes[n]!) ?? 0) > now)) n++;
    return n;
  }

  /** `backend`'s reported blocks: hash → copies (what its events said, pending ones aside). */
  held(backend: string): ReadonlyMap<bigint, number> {
    return this.#blocks.get(backend) ?? new Map();
  }

  size(backend: string): number {
    return this.#blocks.get(backend)?.size ?? 0;
  }
}
