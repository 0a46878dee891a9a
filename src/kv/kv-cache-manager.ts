/**
 * The scheduler's view of the KV cache (vLLM's KVCacheManager): prefix hits, slot
 * allocation, caching, freeing, sliding-window trimming, events (see
 * docs/kv-cache.md#manager-createkvcachemanageroptions and docs/scheduler.md).
 */

import type { HashAlgo } from '../config/types.ts';
import { KVError } from '../errors/index.ts';
import { DEFAULT_HASH_ALGO, isCollisionResistant } from './block-hash.ts';
import { BlockPool, type KVBlock } from './block-pool.ts';
import { KVCacheCoordinator } from './coordinator.ts';
import type {
  AllocateSlotsOptions,
  CacheRequest,
  KVCacheBlocks,
  KVCacheConfig,
  KVCacheEvent,
  KVCacheManager,
} from './interfaces.ts';
import { emptyBlockList, KVCacheBlockList } from './kv-cache-blocks.ts';
import { cdiv } from './specs.ts';

export interface KVCacheManagerOptions {
  kvCacheConfig: KVCacheConfig;
  /** Default true. */
  enablePrefixCaching?: boolean;
  maxModelLen: number;
  /** Algorithm of the request block hashes; xxhash* turns on token verification. Default sha256_cbor. */
  hashAlgo?: HashAlgo;
  /** Compare token ids on every prefix hit. Default: true for xxhash*, false for sha256*. */
  verifyBlockTokens?: boolean;
  /** Collect BlockStored/BlockRemoved/AllBlocksCleared for takeEvents(). Default false. */
  enableKvCacheEvents?: boolean;
}

export class PagedKVCacheManager implements KVCacheManager {
  readonly kvCacheConfig: KVCacheConfig;
  readonly blockSize: number;
  /** Tokens per entry of request.blockHashes (the GCD of group block sizes). */
  readonly hashBlockSize: number;
  readonly numGroups: number;
  readonly enablePrefixCaching: boolean;
  readonly maxModelLen: number;
  readonly pool: BlockPool;
  readonly #coordinator: KVCacheCoordinator;
  /** Tokens given slots per request, for requests that do not report numComputedTokens. */
  readonly #allocatedTokens = new Map<string, number>();

  constructor(opts: KVCacheManagerOptions) {
    const config = opts.kvCacheConfig;
    if (config.groups.length === 0) {
      throw new KVError('KV_INVALID_SPEC', 'KVCacheConfig has no groups', {
        hint: 'Build it with buildKVCacheConfig().',
      });
    }
    this.kvCacheConfig = config;
    this.numGroups = config.groups.length;
    this.enablePrefixCaching = opts.enablePrefixCaching ?? true;
    this.maxModelLen = opts.maxModelLen;
    const sizes = config.groups.map((g) => g.spec.blockSize);
    this.hashBlockSize = sizes.reduce(gcd);
    const verify = opts.verifyBlockTokens ?? !isCollisionResistant(opts.hashAlgo ?? DEFAULT_HASH_ALGO);
    const uniform = sizes.every((s) => s === this.hashBlockSize);
    if (verify && !uniform) {
      throw new KVError(
        'KV_INVALID_SPEC',
        'token verification of prefix hits needs one block size for every group',
        {
          field: 'cache.prefix_caching_hash_algo',
          hint: 'Use sha256_cbor with mixed block sizes.',
        },
      );
    }
    this.pool = new BlockPool({
      numBlocks: config.numBlocks,
      numGroups: this.numGroups,
      enableCaching: this.enablePrefixCaching,
      enableKvCacheEvents: opts.enableKvCacheEvents ?? false,
      verifyTokensBlockSize: verify && this.enablePrefixCaching ? this.hashBlockSize : null,
    });
    this.#coordinator = new KVCacheCoordinator(config, this.pool, this.hashBlockSize, verify);
    this.blockSize = this.#coordinator.schedulerBlockSize;
  }

  get numFreeBlocks(): number {
    return this.pool.numFreeBlocks;
  }

  get usage(): number {
    return this.pool.usage;
  }

  getComputedBlocks(req: CacheRequest): { blocks: KVCacheBlocks; numComputedTokens: number } {
    if (!this.enablePrefixCaching) return { blocks: this.emptyBlocks(), numComputedTokens: 0 };
    // A full hit still leaves the last token to compute, to get logits for sampling.
    const maxHit = req.numTokens - 1;
    const { blocks, numTokens } = this.#coordinator.findLongestCacheHit(req, maxHit);
    return { blocks: new KVCacheBlockList(blocks), numComputedTokens: numTokens };
  }

  allocateSlots(
    req: CacheRequest,
    numNewTokens: number,
    options: AllocateSlotsOptions = {},
  ): KVCacheBlocks | null {
    const numNewComputed = options.numNewComputedTokens ?? 0;
    const numExternal = options.numExternalComputedTokens ?? 0;
    if (numNewTokens === 0 && numExternal === 0) {
      throw new KVError(
        'KV_INVALID_ALLOCATION',
        'num_new_tokens must be greater than 0 when there are no external computed tokens',
        {
          hint: 'Call allocateSlots with at least one new token, or with numExternalComputedTokens for a load.',
        },
      );
    }
    const newComputed = (options.newComputedBlocks?.blocks ?? null) as readonly (readonly KVBlock[])[] | null;
    const reqComputed = req.numComputedTokens ?? this.#allocatedTokens.get(req.requestId) ?? 0;
    const numLocalComputed = reqComputed + numNewComputed;
    const totalComputed = Math.min(numLocalComputed + numExternal, this.maxModelLen);
    const numTokensMain = totalComputed + numNewTokens;
    const numNeedSlot = Math.min(numTokensMain + (options.numLookaheadTokens ?? 0), this.maxModelLen);
    const managers = this.#coordinator.managers;
    for (const m of managers) m.removeSkippedBlocks(req.requestId, totalComputed);
    let needed = 0;
    for (const m of managers) {
      const computed = newComputed?.[m.groupId] ?? [];
      needed += m.numBlocksToAllocate(req.requestId, numNeedSlot, computed, numLocalComputed + numExternal);
    }
    if (needed > this.pool.numFreeBlocks - (options.reservedBlocks ?? 0)) return null;
    if (newComputed !== null || numExternal > 0) {
      for (const m of managers) {
        m.allocateNewComputedBlocks(
          req.requestId,
          newComputed?.[m.groupId] ?? [],
          numLocalComputed,
          numExternal,
        );
      }
    }
    const fresh = managers.map((m) => m.allocateNewBlocks(req.requestId, numNeedSlot));
    this.#allocatedTokens.set(req.requestId, numTokensMain);
    if (this.enablePrefixCaching && !options.delayCacheBlocks) {
      const numToCache = Math.min(totalComputed + numNewTokens, req.numTokens);
      for (const m of managers) m.cacheBlocks(req, numToCache);
    }
    return new KVCacheBlockList(fresh);
  }

  cacheBlocks(req: CacheRequest, numComputedTokens: number): void {
    if (!this.enablePrefixCaching) return;
    for (const m of this.#coordinator.managers) m.cacheBlocks(req, numComputedTokens);
  }

  free(requestId: string): void {
    for (const m of this.#coordinator.managers) m.free(requestId);
    this.#allocatedTokens.delete(requestId);
  }

  removeSkippedBlocks(requestId: string, numComputedTokens: number): void {
    for (const m of this.#coordinator.managers) m.removeSkippedBlocks(requestId, numComputedTokens);
  }

  getBlocks(requestId: string): KVCacheBlockList {
    return new KVCacheBlockList(this.#coordinator.managers.map((m) => [...m.blocksOf(requestId)]));
  }

  getBlockIds(requestId: string): number[][] {
    return this.#coordinator.managers.map((m) => m.blocksOf(requestId).map((b) => b.blockId));
  }

  evictBlocks(blockIds: Iterable<number>): void {
    this.pool.evictBlocks(blockIds);
  }

  resetPrefixCache(): boolean {
    return this.pool.resetPrefixCache();
  }

  emptyBlocks(): KVCacheBlockList {
    return emptyBlockList(this.numGroups);
  }

  numBlocksNeeded(numTokens: number): number {
    return this.kvCacheConfig.groups.reduce((sum, g) => sum + cdiv(numTokens, g.spec.blockSize), 0);
  }

  takeEvents(): KVCacheEvent[] {
    return this.pool.takeEvents();
  }
}

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

export function createKVCacheManager(opts: KVCacheManagerOptions): PagedKVCacheManager {
  return new PagedKVCacheManager(opts);
}
