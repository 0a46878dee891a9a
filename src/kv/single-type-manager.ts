/**
 * Per-group block bookkeeping (vLLM's SingleTypeKVCacheManager): which blocks each request
 * holds in one KV cache group, how many are cached, and the attention type's rules for
 * skipped tokens (sliding window) and for finding prefix-cache hits.
 */
import type { BlockPool, CachingRequest, KVBlock } from './block-pool.ts';
import type { BlockHash, KVCacheSpec } from './interfaces.ts';
import { cdiv } from './specs.ts';

/** Block hashes seen at a group's block size (vLLM's BlockHashListWithBlockSize). */
export interface HashView {
  readonly length: number;
  at(i: number): BlockHash;
}

export function hashView(hashes: readonly BlockHash[], scale: number): HashView {
  if (scale === 1) return { length: hashes.length, at: (i) => hashes[i]! };
  return { length: Math.floor(hashes.length / scale), at: (i) => hashes[(i + 1) * scale - 1]! };
}

export interface HitQuery {
  hashes: HashView;
  maxLength: number;
  groupIds: readonly number[];
  pool: BlockPool;
  spec: KVCacheSpec;
  /** Hit length must be a multiple of this many tokens. */
  alignment: number;
  /** Request tokens, when hits must be verified against stored token ids. */
  tokens: readonly number[] | null;
}

export class SingleTypeManager {
  readonly spec: KVCacheSpec;
  readonly groupId: number;
  readonly blockSize: number;
  readonly #pool: BlockPool;
  readonly #reqToBlocks = new Map<string, KVBlock[]>();
  /** Presence marks a running request (vLLM's num_cached_block). */
  readonly #numCached = new Map<string, number>();
  readonly #hashScale: number;

  constructor(spec: KVCacheSpec, groupId: number, pool: BlockPool, hashBlockSize: number) {
    this.spec = spec;
    this.groupId = groupId;
    this.blockSize = spec.blockSize;
    this.#pool = pool;
    this.#hashScale = spec.blockSize / hashBlockSize;
  }

  /** Tokens at the front that attention no longer reads once `numComputed` are computed. */
  numSkippedTokens(numComputedTokens: number): number {
    if (this.spec.kind !== 'sliding_window' || this.spec.slidingWindow === null) return 0;
    return Math.max(0, numComputedTokens - this.spec.slidingWindow + 1);
  }

  blocksOf(requestId: string): readonly KVBlock[] {
    return this.#reqToBlocks.get(requestId) ?? [];
  }

  numBlocksToAllocate(
    requestId: string,
    numTokens: number,
    newComputed: readonly KVBlock[],
    totalComputedTokens: number,
  ): number {
    const required = cdiv(numTokens, this.blockSize);
    const held = this.#reqToBlocks.get(requestId)?.length ?? 0;
    if (this.#numCached.has(requestId)) return Math.max(required - held, 0);
    const skippedBlocks = Math.floor(this.numSkippedTokens(totalComputedTokens) / this.blockSize);
    const localComputed = newComputed.length + held;
    const newBlocks = Math.max(required - Math.max(skippedBlocks, localComputed), 0);
    const skippedNewComputed = Math.max(0, skippedBlocks - held);
    let evictable = 0;
    for (let i = skippedNewComputed; i < newComputed.length; i++) {
      const b = newComputed[i]!;
      if (b.refCount === 0 && !b.isNull) evictable++;
    }
    return newBlocks + evictable;
  }

  /** Adds prefix-cache hits (touched) and blocks for externally computed tokens. */
  allocateNewComputedBlocks(
    requestId: string,
    newComputed: readonly KVBlock[],
    numLocalComputedTokens: number,
    numExternalComputedTokens: number,
  ): void {
    if (this.#numCached.has(requestId)) return;
    const blocks = this.#blocksFor(requestId);
    const total = numLocalComputedTokens + numExternalComputedTokens;
    const skippedBlocks = Math.floor(this.numSkippedTokens(total) / this.blockSize);
    const kept = skippedBlocks > 0 ? newComputed.slice(skippedBlocks) : newComputed;
    this.#pool.touch(kept);
    for (let i = 0; i < skippedBlocks; i++) blocks.push(this.#pool.nullBlock);
    for (const b of kept) blocks.push(b);
    this.#numCached.set(requestId, blocks.length);
    if (numExternalComputedTokens > 0) {
      const missing = cdiv(total, this.blockSize) - blocks.length;
      if (missing > 0) this.#pool.getNewBlocks(missing, blocks);
    }
  }

  allocateNewBlocks(requestId: string, numTokens: number): KVBlock[] {
    const blocks = this.#blocksFor(requestId);
    const missing = cdiv(numTokens, this.blockSize) - blocks.length;
    if (missing <= 0) return [];
    const start = blocks.length;
    this.#pool.getNewBlocks(missing, blocks);
    return blocks.slice(start);
  }

  cacheBlocks(req: CachingRequest & { readonly requestId: string }, numTokens: number): void {
    const numCached = this.#numCached.get(req.requestId) ?? 0;
    const hashedBlocks = Math.floor(req.blockHashes.length / this.#hashScale);
    const numFull = Math.min(Math.floor(numTokens / this.blockSize), hashedBlocks);
    if (numCached >= numFull) return;
    const blocks = this.#reqToBlocks.get(req.requestId) ?? [];
    const view = hashView(req.blockHashes, this.#hashScale);
    const hashes =
      this.#hashScale === 1 ? req.blockHashes : Array.from({ length: numFull }, (_, i) => view.at(i));
    this.#pool.cacheFullBlocks(
      { allTokenIds: req.allTokenIds, blockHashes: hashes, loraName: req.loraName, loraId: req.loraId },
      blocks,
      numCached,
      Math.min(numFull, blocks.length),
      this.blockSize,
      this.groupId,
    );
    this.#numCached.set(req.requestId, Math.min(numFull, blocks.length));
  }

  /** Frees in reverse so the tail of the sequence is evicted first. */
  free(requestId: string): void {
    const blocks = this.#reqToBlocks.get(requestId);
    this.#reqToBlocks.delete(requestId);
    this.#numCached.delete(requestId);
    if (blocks) this.#pool.freeBlocksReversed(blocks);
  }

  /** Sliding window: blocks wholly before the window become the null block and are freed. */
  removeSkippedBlocks(requestId: string, numComputedTokens: number): void {
    const skippedTokens = this.numSkippedTokens(numComputedTokens);
    if (skippedTokens <= 0) return;
    const blocks = this.#reqToBlocks.get(requestId);
    if (!blocks) return;
    const skipped = Math.min(Math.floor(skippedTokens / this.blockSize), blocks.length);
    const removed: KVBlock[] = [];
    for (let i = skipped - 1; i >= 0; i--) {
      const b = blocks[i]!;
      if (b.isNull) break; // everything before was removed by an earlier call
      removed.push(b);
      blocks[i] = this.#pool.nullBlock;
    }
    if (removed.length > 0) this.#pool.freeBlocks(removed);
  }

  #blocksFor(requestId: string): KVBlock[] {
    let blocks = this.#reqToBlocks.get(requestId);
    if (!blocks) {
      blocks = [];
      this.#reqToBlocks.set(requestId, blocks);
    }
    return blocks;
  }
}
