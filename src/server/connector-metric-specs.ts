/**
 * The built-in connectors' Prometheus metrics (vLLM's build_prom_metrics), as specs over the
 * keys of their stats data. NIXL's and the OffloadingConnector's are vLLM's exactly
 * (nixl/stats.py, offloading/metrics.py: names, help texts, buckets); vLLM's Python client
 * serves a Counter `vllm:x` as `vllm:x_total`, so counter names carry the suffix here.
 */

export interface ConnectorMetricSpec {
  name: string;
  help: string;
  type: 'histogram' | 'counter' | 'gauge';
  /** Key in the connector's stats data. */
  key: string;
  buckets?: number[];
  /** Multiplier applied to every value (e.g. 1e-3 for ms → s). */
  scale?: number;
  /** data[key] maps a label value to samples: one series per entry, with this label. */
  by?: string;
  /** The samples are objects: use this field of each. */
  field?: string;
}

const NIXL_TIME_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0];
/** 2 KiB .. 8 GiB, every other power of two (vLLM: "uniform 2kb to 16gb range"). */
const NIXL_BYTES_BUCKETS = Array.from({ length: 12 }, (_, i) => 2 ** (11 + 2 * i));
const NIXL_DESCRIPTOR_BUCKETS = [10, 20, 30, 50, 75, 100, 200, 400, 1000, 2000, 4000, 10000, 20000, 50000];

const NIXL_METRICS: readonly ConnectorMetricSpec[] = [
  {
    name: 'vllm:nixl_xfer_time_seconds',
    help: 'Histogram of transfer duration for NIXL KV Cache transfers.',
    type: 'histogram',
    key: 'transfer_duration',
    buckets: NIXL_TIME_BUCKETS.slice(1),
  },
  {
    name: 'vllm:nixl_xfer_wire_time_seconds',
    help: 'kvconnect: NIXL transfer duration minus the time the peer held a READ before serving it (waiting for its grant).',
    type: 'histogram',
    key: 'wire_duration',
    buckets: NIXL_TIME_BUCKETS.slice(1),
  },
  {
    name: 'vllm:nixl_post_time_seconds',
    help: 'Histogram of transfer post time for NIXL KV Cache transfers.',
    type: 'histogram',
    key: 'post_duration',
    buckets: NIXL_TIME_BUCKETS,
  },
  {
    name: 'vllm:nixl_bytes_transferred',
    help: 'Histogram of bytes transferred per NIXL KV Cache transfers.',
    type: 'histogram',
    key: 'bytes_transferred',
    buckets: NIXL_BYTES_BUCKETS,
  },
  {
    name: 'vllm:nixl_num_descriptors',
    // Two spaces: vLLM's string concatenation, kept so the help text matches a vLLM scrape.
    help: 'Histogram of number of descriptors per NIXL  KV Cache transfers.',
    type: 'histogram',
    key: 'num_descriptors',
    buckets: NIXL_DESCRIPTOR_BUCKETS,
  },
  {
    name: 'vllm:nixl_num_failed_transfers_total',
    help: 'Number of failed NIXL KV Cache transfers.',
    type: 'counter',
    key: 'num_failed_transfers',
  },
  {
    name: 'vllm:nixl_num_failed_notifications_total',
    help: 'Number of failed NIXL KV Cache notifications.',
    type: 'counter',
    key: 'num_failed_notifications',
  },
  {
    name: 'vllm:nixl_num_kv_expired_reqs_total',
    help: 'Number of requests that had their KV expire. NOTE: This metric is tracked on the P instance.',
    type: 'counter',
    key: 'num_kv_expired_reqs',
  },
];

/**
 * kvconnect's own: vLLM's MoRIIO connector has no Prometheus metrics. Shaped like NIXL's; a
 * transfer is observed on the engine that posts it (P in WRITE mode, D in READ).
 */
const MORIIO_METRICS: readonly ConnectorMetricSpec[] = [
  {
    name: 'vllm:moriio_xfer_time_seconds',
    help: 'Histogram of transfer duration for MoRIIO KV cache transfers.',
    type: 'histogram',
    key: 'transfer_duration',
    buckets: NIXL_TIME_BUCKETS.slice(1),
  },
  {
    name: 'vllm:moriio_bytes_transferred',
    help: 'Histogram of bytes transferred per MoRIIO KV cache transfer.',
    type: 'histogram',
    key: 'bytes_transferred',
    buckets: NIXL_BYTES_BUCKETS,
  },
  {
    name: 'vllm:moriio_num_descriptors',
    help: 'Histogram of number of descriptors per MoRIIO KV cache transfer.',
    type: 'histogram',
    key: 'num_descriptors',
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384],
  },
  {
    name: 'vllm:moriio_num_failed_transfers_total',
    help: 'Number of failed MoRIIO KV cache transfers.',
    type: 'counter',
    key: 'num_failed_transfers',
  },
  {
    name: 'vllm:moriio_num_failed_notifications_total',
    help: 'Number of MoRIIO control messages (remote_blocks, write_done, release) that failed.',
    type: 'counter',
    key: 'num_failed_notifications',
  },
  {
    name: 'vllm:moriio_num_transfer_timeouts_total',
    help: 'Number of MoRIIO KV cache transfers that ran past transfer_timeout.',
    type: 'counter',
    key: 'num_transfer_timeouts',
  },
  {
    name: 'vllm:moriio_num_reaped_sends_total',
    help: 'Number of prefill requests whose held blocks were freed after defer_timeout without an ACK.',
    type: 'counter',
    key: 'num_reaped_sends',
  },
];

/** Bytes (vLLM's OffloadPromMetrics buckets). */
const OFFLOAD_SIZE_BUCKETS = [1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6];

/** Stats key `offload_transfers`: {transfer_type: [{op_size, op_time}, ...]}. */
const OFFLOAD_METRICS: readonly ConnectorMetricSpec[] = [
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

export const BUILTIN_CONNECTOR_METRICS: Readonly<Record<string, readonly ConnectorMetricSpec[]>> = {
  NixlConnector: NIXL_METRICS,
  NixlPullConnector: NIXL_METRICS,
  NixlPushConnector: NIXL_METRICS,
  MoRIIOConnector: MORIIO_METRICS,
  OffloadingConnector: OFFLOAD_METRICS,
};
