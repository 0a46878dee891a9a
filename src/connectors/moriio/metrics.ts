/**
 * MoRIIOConnector's Prometheus metrics (docs/connectors/moriio.md#metrics). kvconnect's own:
 * vLLM's MoRIIO connector has none. Shaped like NIXL's; a transfer is observed on the engine
 * that posts it (P in WRITE mode, D in READ).
 */
import {
  type ConnectorMetricSpec,
  TRANSFER_BYTES_BUCKETS,
  TRANSFER_TIME_BUCKETS,
} from '../../connector/metric-specs.ts';
import type { MoRIIOSchedulerStatsData, MoRIIOStatsData } from './stats.ts';

export const MORIIO_METRICS: readonly ConnectorMetricSpec<MoRIIOStatsData & MoRIIOSchedulerStatsData>[] = [
  {
    name: 'vllm:moriio_xfer_time_seconds',
    help: 'Histogram of transfer duration for MoRIIO KV cache transfers.',
    type: 'histogram',
    key: 'transfer_duration',
    buckets: TRANSFER_TIME_BUCKETS.slice(1),
  },
  {
    name: 'vllm:moriio_bytes_transferred',
    help: 'Histogram of bytes transferred per MoRIIO KV cache transfer.',
    type: 'histogram',
    key: 'bytes_transferred',
    buckets: TRANSFER_BYTES_BUCKETS,
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
