/**
 * Which KV blocks each backend holds, learnt from its KV events: block hash → how many
 * copies (stores minus removals, over every medium and group), per backend. A backend that
 * restarts (its publisher's sequence resets), clears its cache (AllBlocksCleared) or stops
 * answering health checks starts again from nothing.
 */
import type { KVEventBatch } from '../kv-events/wire.ts';

export class KvBlockIndex {
  readonly #blocks = new Map<string, Map<bigint, number>>();

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
  }

  /** How many of `hashes`, from the first on, `backend` holds. */
  prefixLength(backend: string, hashes: readonly bigint[]): number {
    const blocks = this.#blocks.get(backend);
    if (!blocks) return 0;
    let n = 0;
    while (n < hashes.length && blocks.has(hashes[n]!)) n++;
    return n;
  }

  size(backend: string): number {
    return this.#blocks.get(backend)?.size ?? 0;
  }
}
