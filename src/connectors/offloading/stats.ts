/**
 * OffloadingConnector's stats (docs/connectors/offloading.md#metrics): counts since the last
 * report, from the scheduler half (chunks decided) and the worker half (bytes moved, tier
 * failures), summed per interval by the engine.
 */

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
