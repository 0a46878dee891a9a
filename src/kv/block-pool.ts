/**
 * The block pool shared by every KV cache group (vLLM's BlockPool): block 0 is the null
 * block; the others are ref-counted, taken from the free queue's head, and returned to its
 * tail. A full block can be cached under its prefix hash (per group) and stays findable
 * while free until the pool hands it out again (LRU eviction) or it is evicted explicitly.
 */
import { KVError } from '../errors/index.ts';
import { blockHashKey, externalBlockHash } from './block-hash.ts';
import { blockExtraKeys } from './block-hasher.ts';
import { FreeBlockQueue } from './free-block-queue.ts';
import type { BlockHash, KVCacheBlock, KVCacheEvent } from './interfaces.ts';

export class KVBlock implements KVCacheBlock {
  readonly blockId: number;
  refCount = 0;
  blockHash: BlockHash | null = null;
  /** Map key of the cached hash and the group it is cached in. */
  hashKey: string | null = null;
  groupId = -1;
  isNull = false;

  constructor(blockId: number) {
    this.blockId = blockId;
  }
}

type Bucket = KVBlock | Map<number, KVBlock>;

export interface BlockPoolOptions {
  numBlocks: number;
  numGroups: number;
  enableCaching: boolean;
  enableKvCacheEvents?: boolean;
  /** Keep each cached block's token ids and compare them on hits (non-cryptographic hashes). */
  verifyTokensBlockSize?: number | null;
}

/** What cacheFullBlocks needs from a request. */
export interface CachingRequest {
  readonly allTokenIds: readonly number[];
  readonly blockHashes: readonly BlockHash[];
  readonly loraName?: string | undefined;
  readonly loraId?: number | undefined;
  readonly cacheSalt?: string | undefined;
}

export class BlockPool {
  readonly numBlocks: number;
  readonly enableCaching: boolean;
  readonly blocks: readonly KVBlock[];
  readonly nullBlock: KVBlock;
  readonly #free: FreeBlockQueue;
  readonly #cached: Map<string, Bucket>[];
  readonly #events: KVCacheEvent[] = [];
  readonly #eventsOn: boolean;
  readonly #tokenBlockSize: number;
  readonly #tokens: Int32Array | null;

  constructor(opts: BlockPoolOptions) {
    if (!Number.isInteger(opts.numBlocks) || opts.numBlocks < 2) {
      throw new KVError(
        'KV_CACHE_TOO_SMALL',
        `the block pool needs at least 2 blocks, got ${opts.numBlocks}`,
        {
          field: 'cache.num_gpu_blocks',
          hint: 'Block 0 is the reserved null block; give the KV cache more blocks.',
        },
      );
    }
    this.numBlocks = opts.numBlocks;
    this.enableCaching = opts.enableCaching;
    this.#eventsOn = opts.enableKvCacheEvents ?? false;
    this.blocks = Array.from({ length: opts.numBlocks }, (_, i) => new KVBlock(i));
    this.#free = new FreeBlockQueue(opts.numBlocks);
    this.#cached = Array.from({ length: opts.numGroups }, () => new Map<string, Bucket>());
    this.nullBlock = this.blocks[this.#free.popLeft()]!;
    this.nullBlock.isNull = true;
    this.#tokenBlockSize = opts.verifyTokensBlockSize ?? 0;
    this.#tokens = this.#tokenBlockSize > 0 ? new Int32Array(opts.numBlocks * this.#tokenBlockSize) : null;
  }

  get numFreeBlocks(): number {
    return this.#free.size;
  }

  /** Fraction of usable blocks in use (the null block excluded). */
  get usage(): number {
    const total = this.numBlocks - 1;
    return total === 0 ? 0 : 1 - this.#free.size / total;
  }

  /** Takes `n` blocks from the head of the free queue (evicting their cached hashes). */
  getNewBlocks(n: number, out: KVBlock[] = []): KVBlock[] {
    if (n > this.#free.size) {
      throw new KVError('KV_OUT_OF_BLOCKS', `Cannot get ${n} free blocks from the pool`, {
        hint: 'Check numFreeBlocks before allocating (allocateSlots returns null instead).',
      });
    }
    for (let i = 0; i < n; i++) {
      const block = this.blocks[this.#free.popLeft()]!;
      if (this.enableCaching) this.#evictCached(block);
      block.refCount = 1;
      out.push(block);
    }
    return out;
  }

  /** Cached hit: a free block leaves the free queue; every block gains a reference. */
  touch(blocks: readonly KVBlock[]): void {
    for (const block of blocks) {
      if (block.isNull) continue;
      if (block.refCount === 0) this.#free.remove(block.blockId);
      block.refCount++;
    }
  }

  /** Drops one reference per block, iterating from the last to the first block. */
  freeBlocksReversed(blocks: readonly KVBlock[]): void {
    for (let i = blocks.length - 1; i >= 0; i--) {
      const block = blocks[i]!;
      if (block.isNull) continue;
      if (block.refCount <= 0) throw new Error(`block ${block.blockId} freed more often than allocated`);
      block.refCount--;
    }
    for (let i = blocks.length - 1; i >= 0; i--) {
      const block = blocks[i]!;
      if (!block.isNull && block.refCount === 0 && !this.#free.has(block.blockId))
        this.#free.append(block.blockId);
    }
  }

  /** Same as freeBlocksReversed, in the given order. */
  freeBlocks(blocks: readonly KVBlock[]): void {
    this.freeBlocksReversed([...blocks].reverse());
  }

  /** A block cached under `hash` in every group of `groupIds`, or null if any group misses. */
  getCachedBlock(
    hash: BlockHash,
    groupIds: readonly number[],
    tokens?: readonly number[],
    start = 0,
  ): KVBlock[] | null {
    const key = blockHashKey(hash);
    const out: KVBlock[] = [];
    for (const g of groupIds) {
      const bucket = this.#cached[g]!.get(key);
      if (!bucket) return null;
      const block = bucket instanceof KVBlock ? bucket : bucket.values().next().value!;
      if (tokens && !this.#sameTokens(block, tokens, start)) return null;
      out.push(block);
    }
    return out;
  }

  /** Caches blocks[numCached..numFull) of a request under its hashes, in group `groupId`. */
  cacheFullBlocks(
    req: CachingRequest,
    blocks: readonly KVBlock[],
    numCached: number,
    numFull: number,
    blockSize: number,
    groupId: number,
  ): void {
    if (numCached >= numFull) return;
    if (req.blockHashes.length < numFull) {
      throw new KVError(
        'KV_MISSING_BLOCK_HASHES',
        `request has ${req.blockHashes.length} block hashes, ${numFull} needed`,
        {
          hint: 'Update request.blockHashes with a BlockHasher whenever tokens are appended.',
        },
      );
    }
    const stored: bigint[] = [];
    const extras: (readonly unknown[] | null)[] = [];
    for (let i = numCached; i < numFull; i++) {
      const block = blocks[i]!;
      if (block.isNull || block.blockHash !== null) continue;
      const hash = req.blockHashes[i]!;
      const key = blockHashKey(hash);
      block.blockHash = hash;
      block.hashKey = key;
      block.groupId = groupId;
      this.#insert(groupId, key, block);
      if (this.#tokens) this.#storeTokens(block, req.allTokenIds, i * blockSize);
      if (this.#eventsOn) {
        stored.push(externalBlockHash(hash));
        extras.push(blockExtraKeys(req, i * blockSize, (i + 1) * blockSize));
      }
    }
    if (this.#eventsOn && stored.length > 0) {
      const parent = numCached > 0 ? req.blockHashes[numCached - 1] : undefined;
      this.#events.push({
        type: 'BlockStored',
        blockHashes: stored,
        parentBlockHash: parent ? externalBlockHash(parent) : null,
        tokenIds: req.allTokenIds.slice(numCached * blockSize, numFull * blockSize),
        blockSize,
        groupIdx: groupId,
        medium: 'GPU',
        loraName: req.loraName ?? null,
        loraId: req.loraId ?? null,
        extraKeys: extras,
      });
    }
  }

  /** Removes the blocks' hashes from the prefix cache; the blocks stay where they are. */
  evictBlocks(blockIds: Iterable<number>): void {
    for (const id of blockIds) {
      const block = this.blocks[id];
      if (block && !block.isNull) this.#evictCached(block);
    }
  }

  /** Clears the prefix cache; fails (false) while any block is in use. */
  resetPrefixCache(): boolean {
    if (this.#free.size !== this.numBlocks - 1) return false;
    for (const map of this.#cached) map.clear();
    for (const block of this.blocks) {
      block.blockHash = null;
      block.hashKey = null;
      block.groupId = -1;
    }
    if (this.#eventsOn) this.#events.push({ type: 'AllBlocksCleared' });
    return true;
  }

  takeEvents(): KVCacheEvent[] {
    return this.#events.splice(0, this.#events.length);
  }

  /** Free-queue order (head first), for tests and debugging. */
  freeBlockIds(): number[] {
    return this.#free.toArray();
  }

  isFree(blockId: number): boolean {
    return this.#free.has(blockId);
  }

  numCachedHashes(groupId: number): number {
    return this.#cached[groupId]?.size ?? 0;
  }

  #insert(groupId: number, key: string, block: KVBlock): void {
    const map = this.#cached[groupId]!;
    const bucket = map.get(key);
    if (!bucket) map.set(key, block);
    else if (bucket instanceof KVBlock) {
      map.set(
        key,
        new Map([
          [bucket.blockId, bucket],
          [block.blockId, block],
        ]),
      );
    } else bucket.set(block.blockId, block);
  }

  #evictCached(block: KVBlock): void {
    const key = block.hashKey;
    if (key === null) return;
    const map = this.#cached[block.groupId]!;
    const bucket = map.get(key);
    if (bucket === block) map.delete(key);
    else if (bucket instanceof Map) {
      bucket.delete(block.blockId);
      if (bucket.size === 0) map.delete(key);
      else if (bucket.size === 1) map.set(key, bucket.values().next().value!);
    }
    if (this.#eventsOn && block.blockHash) {
      this.#events.push({
        type: 'BlockRemoved',
        blockHashes: [externalBlockHash(block.blockHash)],
        groupIdx: block.groupId,
        medium: 'GPU',
      });
    }
    block.blockHash = null;
    block.hashKey = null;
    block.groupId = -1;
  }

  #storeTokens(block: KVBlock, tokens: readonly number[], start: number): void {
    const bs = this.#tokenBlockSize;
    const base = block.blockId * bs;
    for (let i = 0; i < bs; i++) this.#tokens![base + i] = tokens[start + i]!;
  }

  #sameTokens(block: KVBlock, tokens: readonly number[], start: number): boolean {
    if (!this.#tokens) return true;
    const bs = this.#tokenBlockSize;
    const base = block.blockId * bs;
    for (let i = 0; i < bs; i++) if (this.#tokens[base + i] !== tokens[start + i]) return false;
    return true;
  }
}
