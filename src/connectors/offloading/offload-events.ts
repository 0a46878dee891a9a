/**
 * KV cache events of the offload tiers (docs/connectors/offloading.md#kv-events): BlockStored
 * / BlockRemoved with medium 'CPU' or 'STORAGE', hashes in the external 64-bit form, as
 * vLLM's OffloadingEventsTracker emits them.
 *
 * - By default (`self_describing_kv_events: false`) every event is vLLM's placeholder: one
 *   hash per chunk (the chunk key's block hash, i.e. its last block's), no parent, no
 *   tokens, `block_size` 0.
 * - With `self_describing_kv_events: true` the scheduler snapshots what each chunk stands for
 *   (its per-block hashes, parent, tokens) when it stores the chunk or sees it as a ready CPU
 *   hit, and events carry the whole payload (`block_size` = the GPU block size). The
 *   snapshot lives while some tier still holds the chunk (reference-counted residencies:
 *   the CPU tier, and each secondary tier that reports removals), so a removal names the
 *   same hashes its store named; a removal of an unknown chunk falls back to the placeholder.
 *   Chunks of several blocks whose prefixes overlap re-announce shared hashes: consumers
 *   count references, as vLLM documents.
 */
import { externalBlockHash } from '../../kv/block-hash.ts';
import type { BlockHash, KVCacheEvent } from '../../kv/interfaces.ts';
import { parseChunkKey } from './layout.ts';
import type { TierLocality } from './tier-config.ts';

export interface ChunkInfo {
  group: number;
  blockHashes: bigint[];
  parent: bigint | null;
  tokenIds: number[];
  /** Tiers holding the chunk ('CPU', or a secondary tier's id). */
  residencies: Set<string>;
}

type Medium = 'CPU' | 'STORAGE';

export class OffloadEvents {
  readonly blockSize: number;
  readonly selfDescribing: boolean;
  readonly #info = new Map<string, ChunkInfo>();
  readonly #maxInfo: number;
  #events: KVCacheEvent[] = [];

  constructor(blockSize: number, selfDescribing: boolean, maxInfo = 200_000) {
    this.blockSize = blockSize;
    this.selfDescribing = selfDescribing;
    this.#maxInfo = maxInfo;
  }

  /** Chunks with a payload snapshot. */
  get described(): number {
    return this.#info.size;
  }

  describe(
    key: string,
    group: number,
    blockHashes: readonly BlockHash[],
    firstBlock: number,
    numBlocks: number,
    tokens: readonly number[],
  ): void {
    if (!this.selfDescribing || this.#info.has(key)) return;
    const parentHash = firstBlock > 0 ? blockHashes[firstBlock - 1] : undefined;
    this.#info.set(key, {
      group,
      blockHashes: blockHashes.slice(firstBlock, firstBlock + numBlocks).map(externalBlockHash),
      parent: parentHash ? externalBlockHash(parentHash) : null,
      tokenIds: tokens.slice(firstBlock * this.blockSize, (firstBlock + numBlocks) * this.blockSize),
      residencies: new Set(),
    });
    while (this.#info.size > this.#maxInfo) {
      const oldest = this.#info.keys().next();
      if (oldest.done) break;
      this.#info.delete(oldest.value);
    }
  }

  /** `residency` names the tier ('CPU' when omitted); `locality` is sent only when set. */
  stored(
    keys: readonly string[],
    medium: Medium,
    locality: TierLocality | null = null,
    residency = 'CPU',
  ): void {
    for (const key of keys) {
      const info = this.#info.get(key);
      if (!info) {
        const p = placeholder(key);
        if (!p) continue;
        this.#events.push({
          type: 'BlockStored',
          blockHashes: [p.hash],
          parentBlockHash: null,
          tokenIds: [],
          blockSize: 0,
          groupIdx: p.group,
          medium,
          ...(locality ? { locality } : {}),
        });
        continue;
      }
      info.residencies.add(residency);
      this.#events.push({
        type: 'BlockStored',
        blockHashes: info.blockHashes,
        parentBlockHash: info.parent,
        tokenIds: info.tokenIds,
        blockSize: this.blockSize,
        groupIdx: info.group,
        medium,
        ...(locality ? { locality } : {}),
      });
    }
  }

  removed(
    keys: readonly string[],
    medium: Medium,
    locality: TierLocality | null = null,
    residency = 'CPU',
  ): void {
    const byGroup = new Map<number, bigint[]>();
    for (const key of keys) {
      const info = this.#info.get(key);
      if (info) {
        const list = byGroup.get(info.group) ?? [];
        list.push(...info.blockHashes);
        byGroup.set(info.group, list);
        info.residencies.delete(residency);
        if (info.residencies.size === 0) this.#info.delete(key);
        continue;
      }
      const p = placeholder(key);
      if (!p) continue;
      const list = byGroup.get(p.group) ?? [];
      list.push(p.hash);
      byGroup.set(p.group, list);
    }
    for (const [groupIdx, blockHashes] of byGroup) {
      this.#events.push({
        type: 'BlockRemoved',
        blockHashes,
        groupIdx,
        medium,
        ...(locality ? { locality } : {}),
      });
    }
  }

  take(): KVCacheEvent[] {
    const out = this.#events;
    this.#events = [];
    return out;
  }
}

/** vLLM's placeholder identity of a chunk: its key's block hash and group. */
function placeholder(key: string): { hash: bigint; group: number } | null {
  const parts = parseChunkKey(key);
  if (!parts) return null;
  return { hash: externalBlockHash(Buffer.from(parts.hashHex, 'hex')), group: parts.group };
}
