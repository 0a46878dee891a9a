/**
 * The OffloadingConnector's Prometheus metrics (docs/serve.md#metrics): vLLM's
 * offloading/metrics.py exactly (names, help texts, buckets): the flat load/store families
 * of current vLLM, and the deprecated families with one series per transfer_type that vLLM
 * still emits beside them. Counter names carry the `_total` suffix vLLM's Python client adds.
 */
import type { ConnectorMetricSpec } from '../../connector/metric-specs.ts';
import type { OffloadTransferOp, OffloadTransferType } from './stats.ts';

/** The stats keys the metrics read: every transfer of the interval, by `src_to_dst` and split into loads and stores. */
export interface OffloadTransferStats {
  offload_transfers: Partial<Record<OffloadTransferType, OffloadTransferOp[]>>;
  offload_load_ops: OffloadTransferOp[];
  offload_store_ops: OffloadTransferOp[];
}

/** Bytes (vLLM's OffloadPromMetrics buckets). */
const OFFLOAD_SIZE_BUCKETS = [1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6];

export const OFFLOAD_METRICS: readonly ConnectorMetricSpec<OffloadTransferStats>[] = [
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
  // Deprecated in vLLM (kept during its migration to the flat names above).
  {
    name: 'vllm:kv_offload_total_bytes_total',
    help: 'Number of bytes offloaded by KV connector',
    type: 'counter',
    key: 'offload_transfers',
    by: 'transfer_type',
    field: 'op_size',
  },
  {
    name: 'vllm:kv_offload_total_time_total',
    help: 'Total time measured by all KV offloading operations',
    type: 'counter',
    key: 'offload_transfers',
    by: 'transfer_type',
    field: 'op_time',
  },
  {
    name: 'vllm:kv_offload_size',
    help: 'Histogram of KV offload transfer size, in bytes.',
    type: 'histogram',
    key: 'offload_transfers',
    by: 'transfer_type',
    field: 'op_size',
    buckets: OFFLOAD_SIZE_BUCKETS,
  },
];
