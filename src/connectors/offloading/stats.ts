/**
 * OffloadingConnector's stats (docs/connectors/offloading.md#metrics): counts since the last
 * report, from the scheduler half (chunks decided) and the worker half (bytes moved, tier
 * failures), summed per interval by the engine.
 */
import type { CacheHitSource } from '../../connector/cache-hit-source.ts';

/** One transfer as vLLM's OffloadingConnectorStats records it: bytes and seconds. */
export interface OffloadTransferOp {
  op_size: number;
  op_time: number;
}

/** `src_to_dst` by medium (GPU = the engine's KV memory, CPU tier, STORAGE = fs/redis/obj tiers). */
export type OffloadTransferType = 'GPU_to_CPU' | 'CPU_to_GPU' | 'STORAGE_to_GPU' | 'CPU_to_STORAGE';

export interface OffloadSchedulerStatsData {
  offload_stored_chunks: number;
  offload_loaded_chunks: number;
  /** Chunks promoted from a secondary tier into their CPU slot. */
  offload_promoted_chunks: number;
  offload_failed_chunks: number;
  offload_cpu_evicted_chunks: number;
  /** Secondary-tier lookups that failed or timed out. */
  offload_lookup_tier_errors: number;
  /** Seconds each getNumNewMatchedTokens call took. */
  offload_lookup_sync_delays: number[];
  /** Seconds from a request's lookup first deferring to the lookup that answered (or its finish). */
  offload_lookup_async_delays: number[];
  /** Store decisions (one per request and step) that found no CPU slot for a chunk. */
  offload_allocation_failures: number;
  /** The CPU slots that cannot be evicted (being written, or pinned by a load), as a fraction; one sample. */
  offload_cpu_cache_usage: number[];
  /** Chunks not stored because store_threshold lookups were not reached yet. */
  offload_stores_skipped: number;
}

export interface OffloadWorkerStatsData {
  offload_transfers: Partial<Record<OffloadTransferType, OffloadTransferOp[]>>;
  /** vLLM's flat names: loads are transfers into the engine's KV memory (`*_to_GPU`)... */
  offload_load_ops: OffloadTransferOp[];
  /** ...and stores transfers out of it (`GPU_to_*`). */
  offload_store_ops: OffloadTransferOp[];
  offload_store_bytes: number;
  offload_load_bytes: number;
  offload_secondary_hits: number;
  offload_secondary_misses: number;
  offload_write_through_bytes: number;
  /** Tier operations that failed or timed out. */
  offload_tier_errors: number;
  offload_tier_corrupt: number;
  offload_tier_outages: number;
}

/** The transfers of an interval split as vLLM's flat metrics count them: loads into GPU, stores out of it. */
export function splitLoadsAndStores(transfers: Partial<Record<OffloadTransferType, OffloadTransferOp[]>>): {
  loads: OffloadTransferOp[];
  stores: OffloadTransferOp[];
} {
  const loads: OffloadTransferOp[] = [];
  const stores: OffloadTransferOp[] = [];
  for (const [type, ops] of Object.entries(transfers) as Array<[OffloadTransferType, OffloadTransferOp[]]>) {
    if (type.endsWith('_to_GPU')) loads.push(...ops);
    else if (type.startsWith('GPU_to_')) stores.push(...ops);
  }
  return { loads, stores };
}

/**
 * The vllm:prompt_tokens_cached_by_source label of a chunk loaded from a tier: the CPU tier
 * is host memory, the fs tier local disk, a peer tier p2p; remote stores (redis, obj) and
 * out-of-tree tiers are `external_unspecified`, as vLLM labels stores it cannot place.
 */
export function tierCacheHitSource(kind: string): CacheHitSource {
  switch (kind) {
    case 'cpu':
      return 'host';
    case 'fs':
      return 'disk';
    case 'p2p':
      return 'p2p';
    default:
      return 'external_unspecified';
  }
}
