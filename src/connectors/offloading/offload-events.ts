/**
 * KV cache events of the offload tiers (docs/kv-cache.md#kv-cache-events): BlockStored /
 * BlockRemoved with medium 'CPU' or 'STORAGE', hashes in the external 64-bit form. The
 * scheduler remembers what each chunk key stands for (hashes, parent, tokens) so that a later
 * removal or a write-through confirmation can be described.
 */
import { externalBlockHash } from '../../kv/block-hash.ts';
import type { BlockHash, KVCacheEvent } from '../../kv/interfaces.ts';

export interface ChunkInfo {
  group: number;
  blockHashes: bigint[];
  parent: bigint | null;
  tokenIds: number[];
}

export class OffloadEvents {
  readonly blockSize: number;
  readonly #info = new Map<string, ChunkInfo>();
  readonly #maxInfo: number;
  #events: KVCacheEvent[] = [];

  constructor(blockSize: number, maxInfo = 200_000) {
    this.blockSize = blockSize;
    this.#maxInfo = maxInfo;
  }

  describe(
    key: string,
    group: number,
    blockHashes: readonly BlockHash[],
    firstBlock: number,
    numBlocks: number,
    tokens: readonly number[],
  ): void {
    if (this.#info.has(key)) return;
    const parentHash = firstBlock > 0 ? blockHashes[firstBlock - 1] : undefined;
    this.#info.set(key, {
      group,
      blockHashes: blockHashes.slice(firstBlock, firstBlock + numBlocks).map(externalBlockHash),
      parent: parentHash ? externalBlockHash(parentHash) : null,
      tokenIds: tokens.slice(firstBlock * this.blockSize, (firstBlock + numBlocks) * this.blockSize),
    });
    while (this.#info.size > this.#maxInfo) {
      const oldest = this.#info.keys().next();
      if (oldest.done) break;
      this.#info.delete(oldest.value);
    }
  }

  stored(keys: readonly string[], medium: 'CPU' | 'STORAGE'): void {
    for (const key of keys) {
      const info = this.#info.get(key);
      if (!info) continue;
      this.#events.push({
        type: 'BlockStored',
        blockHashes: info.blockHashes,
        parentBlockHash: info.parent,
        tokenIds: info.tokenIds,
        blockSize: this.blockSize,
        groupIdx: info.group,
        medium,
      });
    }
  }

  removed(keys: readonly string[], medium: 'CPU' | 'STORAGE'): void {
    for (const key of keys) {
      const info = this.#info.get(key);
      if (!info) continue;
      this.#events.push({
        type: 'BlockRemoved',
        blockHashes: info.blockHashes,
        groupIdx: info.group,
        medium,
      });
    }
  }

  take(): KVCacheEvent[] {
    const out = this.#events;
    this.#events = [];
    return out;
  }
}
