/**
 * The NIXL connectors' Prometheus metrics (docs/serve.md#metrics): vLLM's nixl/stats.py
 * exactly (names, help texts, buckets), plus kvconnect's wire time. Counter names carry the
 * `_total` suffix vLLM's Python client adds.
 */
import {
  type ConnectorMetricSpec,
  TRANSFER_BYTES_BUCKETS,
  TRANSFER_TIME_BUCKETS,
} from '../../connector/metric-specs.ts';
import type { NixlStatsData } from './stats.ts';

const NIXL_DESCRIPTOR_BUCKETS = [10, 20, 30, 50, 75, 100, 200, 400, 1000, 2000, 4000, 10000, 20000, 50000];

export const NIXL_METRICS: readonly ConnectorMetricSpec<NixlStatsData>[] = [
  {
    name: 'vllm:nixl_xfer_time_seconds',
    help: 'Histogram of transfer duration for NIXL KV Cache transfers.',
    type: 'histogram',
    key: 'transfer_duration',
    buckets: TRANSFER_TIME_BUCKETS.slice(1),
  },
  {
    name: 'vllm:nixl_xfer_wire_time_seconds',
    help: 'kvconnect: NIXL transfer duration minus the time the peer held a READ before serving it (waiting for its grant).',
    type: 'histogram',
    key: 'wire_duration',
    buckets: TRANSFER_TIME_BUCKETS.slice(1),
  },
  {
    name: 'vllm:nixl_post_time_seconds',
    help: 'Histogram of transfer post time for NIXL KV Cache transfers.',
    type: 'histogram',
    key: 'post_duration',
    buckets: TRANSFER_TIME_BUCKETS,
  },
  {
    name: 'vllm:nixl_bytes_transferred',
    help: 'Histogram of bytes transferred per NIXL KV Cache transfers.',
    type: 'histogram',
    key: 'bytes_transferred',
    buckets: TRANSFER_BYTES_BUCKETS,
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
  {
    name: 'vllm:nixl_num_failed_handshakes_total',
    help: 'Number of failed NIXL handshakes with remote engines.',
    type: 'counter',
    key: 'num_failed_handshakes',
  },
  {
    name: 'vllm:nixl_num_notifications_after_expiry_total',
    help: 'Number of NIXL read notifications received after the KV blocks had expired. NOTE: This metric is tracked on the P instance.',
    type: 'counter',
    key: 'num_notifications_after_expiry',
  },
];
