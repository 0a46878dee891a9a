/**
 * The OffloadingConnector's Prometheus metrics (docs/serve.md#metrics): vLLM's
 * offloading/metrics.py and its CPU spec's definitions exactly (names, help texts, types,
 * buckets): the flat load/store families, the scheduler's lookup delays and allocation
 * failures, the CPU cache usage, skipped stores (with store_threshold >= 2), and the
 * deprecated transfer_type families vLLM still emits beside the flat ones for its CPU spec
 * (one series per direction, CPU_to_GPU and GPU_to_CPU, from the start). Counter names carry
 * the `_total` suffix vLLM's Python client adds.
 */
import type { KVTransferConfigLike } from '../../config/types.ts';
import type { ConnectorMetricSpec } from '../../connector/metric-specs.ts';
import { OFFLOADING_SPECS } from './config.ts';
import type { OffloadTransferOp } from './stats.ts';

/** The stats keys the metrics read (stats.ts: the worker's transfers, the scheduler's lookups and CPU tier). */
export interface OffloadMetricStats {
  offload_load_ops: OffloadTransferOp[];
  offload_store_ops: OffloadTransferOp[];
  offload_lookup_sync_delays: number[];
  offload_lookup_async_delays: number[];
  offload_allocation_failures: number;
  /** One sample per report: the gauge takes the last. */
  offload_cpu_cache_usage: number[];
  offload_stores_skipped: number;
}

/** Bytes (vLLM's OffloadPromMetrics buckets). */
const OFFLOAD_SIZE_BUCKETS = [1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6];
const LOOKUP_SYNC_BUCKETS = [0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1];
const LOOKUP_ASYNC_BUCKETS = [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10];

type Spec = ConnectorMetricSpec<OffloadMetricStats>;

const TRANSFER_METRICS: readonly Spec[] = [
  {
    name: 'vllm:kv_offload_load_bytes_total',
    help: 'Total bytes loaded from offload storage to GPU.',
    type: 'counter',
    key: 'offload_load_ops',
    field: 'op_size',
  },
  {
    name: 'vllm:kv_offload_load_time_total',
    help: 'Total load time from offload storage to GPU, in seconds.',
    type: 'counter',
    key: 'offload_load_ops',
    field: 'op_time',
  },
  {
    name: 'vllm:kv_offload_load_size',
    help: 'Histogram of KV offload load operation size, in bytes.',
    type: 'histogram',
    key: 'offload_load_ops',
    field: 'op_size',
    buckets: OFFLOAD_SIZE_BUCKETS,
  },
  {
    name: 'vllm:kv_offload_store_bytes_total',
    help: 'Total bytes stored from GPU to offload storage.',
    type: 'counter',
    key: 'offload_store_ops',
    field: 'op_size',
  },
  {
    name: 'vllm:kv_offload_store_time_total',
    help: 'Total store time from GPU to offload storage, in seconds.',
    type: 'counter',
    key: 'offload_store_ops',
    field: 'op_time',
  },
  {
    name: 'vllm:kv_offload_store_size',
    help: 'Histogram of KV offload store operation size, in bytes.',
    type: 'histogram',
    key: 'offload_store_ops',
    field: 'op_size',
    buckets: OFFLOAD_SIZE_BUCKETS,
  },
];

const SCHEDULER_METRICS: readonly Spec[] = [
  {
    name: 'vllm:kv_offload_lookup_sync_delay_seconds',
    help: 'Histogram of the time spent in a single offload lookup call, in seconds.',
    type: 'histogram',
    key: 'offload_lookup_sync_delays',
    buckets: LOOKUP_SYNC_BUCKETS,
  },
  {
    name: 'vllm:kv_offload_lookup_async_delay_seconds',
    help:
      "Histogram of time between a request's offload lookup first deferring and the following " +
      'lookup resolving, or request finish, in seconds.',
    type: 'histogram',
    key: 'offload_lookup_async_delays',
    buckets: LOOKUP_ASYNC_BUCKETS,
  },
  {
    name: 'vllm:kv_offload_allocation_failure_total',
    help: 'Number of KV offload store allocation attempts that failed.',
    type: 'counter',
    key: 'offload_allocation_failures',
  },
];

/** vLLM's CPUOffloadingSpec definitions. */
const CPU_USAGE: Spec = {
  name: 'vllm:kv_offload_cpu_cache_usage_perc',
  help:
    'Fraction of CPU KV-cache space currently pinned by active transfers (0.0 = idle, 1.0 = ' +
    'saturated). Sustained high values indicate transfers (stores or promotions) may be dropped ' +
    'due to insufficient capacity.',
  type: 'gauge',
  key: 'offload_cpu_cache_usage',
};
const STORES_SKIPPED: Spec = {
  name: 'vllm:kv_offload_stores_skipped_total',
  help: 'Number of KV offload stores skipped because the reuse threshold was not reached.',
  type: 'counter',
  key: 'offload_stores_skipped',
};

/** Deprecated in vLLM, fed from the flat families: loads as CPU_to_GPU, stores as GPU_to_CPU. */
function deprecatedTransferMetrics(): Spec[] {
  const out: Spec[] = [];
  for (const [transferType, key] of [
    ['CPU_to_GPU', 'offload_load_ops'],
    ['GPU_to_CPU', 'offload_store_ops'],
  ] as const) {
    const labels = { transfer_type: transferType };
    out.push(
      {
        name: 'vllm:kv_offload_total_bytes_total',
        help: 'Number of bytes offloaded by KV connector',
        type: 'counter',
        key,
        field: 'op_size',
        labels,
      },
      {
        name: 'vllm:kv_offload_total_time_total',
        help: 'Total time measured by all KV offloading operations',
        type: 'counter',
        key,
        field: 'op_time',
        labels,
      },
      {
        name: 'vllm:kv_offload_size',
        help: 'Histogram of KV offload transfer size, in bytes.',
        type: 'histogram',
        key,
        field: 'op_size',
        buckets: OFFLOAD_SIZE_BUCKETS,
        labels,
      },
    );
  }
  return out;
}

/**
 * The metrics of one OffloadingConnector config: with a built-in spec (CPUOffloadingSpec,
 * TieringOffloadingSpec) also the CPU spec's (usage, skipped stores, deprecated families),
 * as vLLM builds them from the spec class; skipped stores only with store_threshold >= 2.
 */
export function offloadMetricSpecs(config: KVTransferConfigLike | null): readonly Spec[] {
  const extra = config?.kv_connector_extra_config ?? {};
  const specName = extra['spec_name'] ?? 'CPUOffloadingSpec';
  const cpuSpec = (OFFLOADING_SPECS as readonly unknown[]).includes(specName);
  const specs: Spec[] = [...TRANSFER_METRICS, ...SCHEDULER_METRICS];
  if (!cpuSpec) return specs;
  specs.push(CPU_USAGE);
  if (Number(extra['store_threshold'] ?? 0) >= 2) specs.push(STORES_SKIPPED);
  specs.push(...deprecatedTransferMetrics());
  return specs;
}
