/**
 * vLLM's NIXL stats (docs/connectors/nixl.md#stats) as plain data, plus the reduce() summary
 * its logger prints. The server maps the data keys to the vllm:nixl_* metrics.
 */
import type { TransferStatsSnapshot } from '../../transfer/index.ts';
import { nearestRankPercentile } from '../../util/percentile.ts';

export interface NixlStatsData {
  transfer_duration: number[];
  /** kvconnect: transfer_duration minus the time P held a READ waiting for its grant. */
  wire_duration: number[];
  post_duration: number[];
  bytes_transferred: number[];
  num_descriptors: number[];
  num_failed_transfers: number;
  num_failed_notifications: number;
  num_kv_expired_reqs: number;
  /** D side: handshakes with a remote engine that failed. */
  num_failed_handshakes: number;
  /** P side: a decode worker reported reading blocks whose lease had already expired. */
  num_notifications_after_expiry: number;
}

/** The connector's counts that do not come from the transfer agent. */
export interface NixlLeaseCounts {
  expired: number;
  afterExpiry: number;
  failedHandshakes: number;
}

export function emptyNixlStats(): NixlStatsData {
  return {
    transfer_duration: [],
    wire_duration: [],
    post_duration: [],
    bytes_transferred: [],
    num_descriptors: [],
    num_failed_transfers: 0,
    num_failed_notifications: 0,
    num_kv_expired_reqs: 0,
    num_failed_handshakes: 0,
    num_notifications_after_expiry: 0,
  };
}

export function statsFromTransfer(s: TransferStatsSnapshot, counts: NixlLeaseCounts): NixlStatsData {
  return {
    transfer_duration: [...s.transferDuration],
    wire_duration: [...s.wireDuration],
    post_duration: [...s.postDuration],
    bytes_transferred: [...s.bytesTransferred],
    num_descriptors: [...s.numDescriptors],
    num_failed_transfers: s.numFailedTransfers,
    num_failed_notifications: s.numFailedNotifications,
    num_kv_expired_reqs: counts.expired,
    num_failed_handshakes: counts.failedHandshakes,
    num_notifications_after_expiry: counts.afterExpiry,
  };
}

export function isEmptyNixlStats(d: NixlStatsData): boolean {
  return (
    d.transfer_duration.length === 0 &&
    d.num_failed_transfers === 0 &&
    d.num_failed_notifications === 0 &&
    d.num_kv_expired_reqs === 0 &&
    d.num_failed_handshakes === 0 &&
    d.num_notifications_after_expiry === 0
  );
}

function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return nearestRankPercentile(sorted, p);
}

const mean = (v: readonly number[]): number => (v.length === 0 ? 0 : v.reduce((a, b) => a + b, 0) / v.length);
const round = (x: number): number => Math.round(x * 1000) / 1000;

/** The summary keys vLLM logs ("KV Transfer metrics: ..."). */
export function reduceNixlStats(d: NixlStatsData): Record<string, number> {
  const n = d.transfer_duration.length;
  const totalBytes = d.bytes_transferred.reduce((a, b) => a + b, 0);
  const totalTime = d.transfer_duration.reduce((a, b) => a + b, 0);
  return {
    'Num successful transfers': n,
    'Avg xfer time (ms)': round(mean(d.transfer_duration) * 1000),
    'P90 xfer time (ms)': round(percentile(d.transfer_duration, 90) * 1000),
    'Avg post time (ms)': round(mean(d.post_duration) * 1000),
    'P90 post time (ms)': round(percentile(d.post_duration, 90) * 1000),
    'Avg MB per transfer': round(mean(d.bytes_transferred) / 1e6),
    'Throughput (MB/s)': round(totalTime > 0 ? totalBytes / 1e6 / totalTime : 0),
    'Avg number of descriptors': round(mean(d.num_descriptors)),
  };
}
