/**
 * The OffloadingConnector's Prometheus metrics (docs/serve.md#metrics): vLLM's
 * offloading/metrics.py exactly (names, help texts, buckets), one series per transfer_type.
 * Counter names carry the `_total` suffix vLLM's Python client adds.
 */
import type { ConnectorMetricSpec } from '../../connector/metric-specs.ts';
import type { OffloadTransferOp, OffloadTransferType } from './stats.ts';

/** The stats key the metrics read: every transfer of the interval, by `src_to_dst`. */
export interface OffloadTransferStats {
  offload_transfers: Partial<Record<OffloadTransferType, OffloadTransferOp[]>>;
}

/** Bytes (vLLM's OffloadPromMetrics buckets). */
const OFFLOAD_SIZE_BUCKETS = [1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6];

export const OFFLOAD_METRICS: readonly ConnectorMetricSpec<OffloadTransferStats>[] = [
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
