/**
 * Contracts of the KV-cache core (src/kv/), shared by the scheduler, the model runner and
 * every connector. The implementations live next to this file; these types are the API.
 * Semantics follow vLLM v1 (vllm/v1/kv_cache_interface.py, vllm/v1/core/kv_cache_manager.py).
 */
import type { KVCacheDtype } from '../config/types.ts';

export type KVCacheSpecKind = 'full_attention' | 'sliding_window';

/** Per-layer KV spec. `pageSizeBytes` = bytes of one block of one layer (K and V). */
export interface KVCacheSpec {
  readonly kind: KVCacheSpecKind;
  readonly blockSize: number;
  readonly numKvHeads: number;
  readonly headSize: number;
  readonly dtype: KVCacheDtype;
  /** Window in tokens for sliding-window layers (also kept on promoted full specs). */
  readonly slidingWindow: number | null;
  readonly pageSizeBytes: number;
}

/** One physical buffer; `sharedBy` lists layer names (one per group in a hybrid model). */
export interface KVCacheTensor {
  readonly size: number;
  readonly sharedBy: readonly string[];
}

export interface KVCacheGroupSpec {
  readonly layerNames: readonly string[];
  readonly spec: KVCacheSpec;
}

/** What every connector constructor receives (vLLM's KVCacheConfig). Plain data. */
export interface KVCacheConfig {
  readonly numBlocks: number;
  readonly tensors: readonly KVCacheTensor[];
  readonly groups: readonly KVCacheGroupSpec[];
}

/** A prefix hash of one full block: raw digest bytes (32 for sha256*, 16 for xxhash*). */
export type BlockHash = Uint8Array;

/** The fields of a request that prefix hashing and the cache manager need. */
export interface CacheRequest {
  readonly requestId: string;
  /** Prompt plus generated tokens. */
  readonly allTokenIds: readonly number[];
  readonly numTokens: number;
  /** Hashes of the full blocks so far (grows as tokens are appended). */
  readonly blockHashes: readonly BlockHash[];
  readonly cacheSalt?: string | undefined;
  readonly loraName?: string | undefined;
  /** The adapter's integer id (vLLM's lora_int_id), carried by BlockStored events. */
  readonly loraId?: number | undefined;
  /** vLLM's request.num_computed_tokens. If absent, the manager assumes every token it gave a
   * slot to in earlier allocateSlots calls has been computed. */
  readonly numComputedTokens?: number | undefined;
}

export interface KVCacheBlock {
  readonly blockId: number;
  readonly refCount: number;
  /** Prefix hash when the block is full and cached, else null. */
  readonly blockHash: BlockHash | null;
  readonly isNull: boolean;
}

/** Blocks of one request (or one allocation), one list per KV cache group. */
export interface KVCacheBlocks {
  readonly blocks: readonly (readonly KVCacheBlock[])[];
  getBlockIds(): number[][];
  /** Only for a single group (asserts), blocks without a hash: the ones to load into. */
  getUnhashedBlockIds(): number[];
  /** Per group, blocks without a hash, skipping null blocks. */
  getUnhashedBlockIdsAllGroups(): number[][];
}

export interface AllocateSlotsOptions {
  numNewComputedTokens?: number;
  newComputedBlocks?: KVCacheBlocks | null;
  numLookaheadTokens?: number;
  numExternalComputedTokens?: number;
  /** Async loads: allocate but do not cache until the data has arrived. */
  delayCacheBlocks?: boolean;
  /** Blocks held back for in-flight async loads of other requests. */
  reservedBlocks?: number;
}

/**
 * KV cache events (docs/kv-cache.md#kv-cache-events). Hashes in external 64-bit form (bigint)
 * on the wire.
 */
export type KVCacheEvent =
  | {
      type: 'BlockStored';
      blockHashes: bigint[];
      parentBlockHash: bigint | null;
      tokenIds: number[];
      blockSize: number;
      groupIdx: number;
      medium: 'GPU' | 'CPU' | 'STORAGE';
      loraName?: string | null;
      loraId?: number | null;
      /** Per block, the extra keys hashed with it (LoRA name, cache salt), or null. */
      extraKeys?: (readonly unknown[] | null)[];
      /** An offload tier's configured locality; absent when unspecified. */
      locality?: 'LOCAL' | 'REMOTE';
    }
  | {
      type: 'BlockRemoved';
      blockHashes: bigint[];
      groupIdx: number;
      medium: 'GPU' | 'CPU' | 'STORAGE';
      locality?: 'LOCAL' | 'REMOTE';
    }
  | { type: 'AllBlocksCleared' };

export interface KVCacheManager {
  readonly kvCacheConfig: KVCacheConfig;
  /** Scheduler block size: the LCM of the groups' block sizes. */
  readonly blockSize: number;
  readonly numGroups: number;
  readonly enablePrefixCaching: boolean;
  /** Longest cached prefix (block-aligned; for hybrid models, agreed by every group). */
  getComputedBlocks(req: CacheRequest): { blocks: KVCacheBlocks; numComputedTokens: number };
  /** null when the pool cannot hold the request's new tokens. */
  allocateSlots(
    req: CacheRequest,
    numNewTokens: number,
    options?: AllocateSlotsOptions,
  ): KVCacheBlocks | null;
  /** Marks the request's full blocks up to `numComputedTokens` as cached (hash → block). */
  cacheBlocks(req: CacheRequest, numComputedTokens: number): void;
  /** Frees every block of the request (cached blocks stay findable until evicted). */
  free(requestId: string): void;
  /** Sliding-window groups: blocks wholly outside the window become the null block. */
  removeSkippedBlocks(requestId: string, numComputedTokens: number): void;
  getBlockIds(requestId: string): number[][];
  getBlocks(requestId: string): KVCacheBlocks;
  /** Removes the blocks' hashes from the prefix cache (poisoned blocks). */
  evictBlocks(blockIds: Iterable<number>): void;
  resetPrefixCache(): boolean;
  emptyBlocks(): KVCacheBlocks;
  /** Number of blocks a request of `numTokens` needs per group, summed. */
  numBlocksNeeded(numTokens: number): number;
  readonly numFreeBlocks: number;
  /** Fraction of blocks in use (0..1), the null block excluded. */
  readonly usage: number;
  takeEvents(): KVCacheEvent[];
}

/** One physical KV buffer of a worker, in SharedArrayBuffer. */
export interface KVTensorBuffer {
  readonly index: number;
  readonly sharedBy: readonly string[];
  readonly buffer: SharedArrayBuffer;
  readonly bytes: Uint8Array;
  /** Bytes of one block: 2 (K,V) × blockSize × numKvHeads × headSize × dtypeBytes. */
  readonly blockBytes: number;
  readonly numBlocks: number;
}

/**
 * The paged KV memory of one worker (one tensor-parallel rank). Layout per tensor:
 * [numBlocks][2 (K,V)][blockSize][numKvHeads][headSize], raw bytes of `dtype`.
 * Block ids index every tensor; a run of consecutive ids is one contiguous byte range.
 */
export interface PagedKVMemory {
  readonly kvCacheConfig: KVCacheConfig;
  readonly dtype: KVCacheDtype;
  readonly numBlocks: number;
  readonly tensors: readonly KVTensorBuffer[];
  /** Tensor index that holds this layer's KV. */
  tensorIndexOfLayer(layerName: string): number;
  /** Group index of a layer. */
  groupOfLayer(layerName: string): number;
  /** Byte view of `count` consecutive blocks of one tensor (no copy). */
  blockRange(tensorIndex: number, firstBlockId: number, count?: number): Uint8Array;
}
