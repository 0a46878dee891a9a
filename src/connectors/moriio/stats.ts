/**
 * MoRIIOConnector's transfer stats as plain data (the server maps the keys to the
 * vllm:moriio_* metrics). vLLM's MoRIIO connector reports no stats; these follow the NIXL
 * shape so the two connectors read alike. A transfer is counted on the side that posts it:
 * P in WRITE mode (one write per layer and D rank), D in READ mode (one read per layer).
 * The agent measures the posted transfers; the recorder adds what happens outside them.
 */
import type { TransferStatsSnapshot } from '../../transfer/index.ts';

export interface MoRIIOStatsData {
  /** Seconds from post to completion, one entry per successful transfer. */
  transfer_duration: number[];
  post_duration: number[];
  bytes_transferred: number[];
  num_descriptors: number[];
  /** Transfers that failed: agent errors, timeouts, handshakes or TP checks that failed before posting. */
  num_failed_transfers: number;
  /** Control messages (remote_blocks, write_done, release, link warm-up) that could not be delivered. */
  num_failed_notifications: number;
  /**
   * Transfers that ran past transfer_timeout: a posted transfer (also in num_failed_transfers),
   * or on D in WRITE mode a wait for P's write_done (P counts that failure, if it saw one).
   */
  num_transfer_timeouts: number;
}

/** Scheduler side (producer): holds given up on after defer_timeout without an ACK. */
export interface MoRIIOSchedulerStatsData {
  num_reaped_sends: number;
}

export function emptyMoRIIOStats(): MoRIIOStatsData {
  return {
    transfer_duration: [],
    post_duration: [],
    bytes_transferred: [],
    num_descriptors: [],
    num_failed_transfers: 0,
    num_failed_notifications: 0,
    num_transfer_timeouts: 0,
  };
}

export function isEmptyMoRIIOStats(d: MoRIIOStatsData): boolean {
  return (
    d.transfer_duration.length === 0 &&
    d.num_failed_transfers === 0 &&
    d.num_failed_notifications === 0 &&
    d.num_transfer_timeouts === 0
  );
}

/** The failures a worker sees outside the agent's own transfers; drained with the agent's stats. */
export class MoRIIOStatsRecorder {
  #failedTransfers = 0;
  #failedNotifications = 0;
  #timeouts = 0;

  /** A transfer failed before (or without) the agent posting it. */
  failedTransfer(): void {
    this.#failedTransfers++;
  }

  /** A transfer ran past transfer_timeout (its failure, if this side posted it, is counted apart). */
  timedOut(): void {
    this.#timeouts++;
  }

  failedNotification(): void {
    this.#failedNotifications++;
  }

  /** This interval's stats (the agent's snapshot plus the recorder's counts), then resets. */
  take(agent: TransferStatsSnapshot | null): MoRIIOStatsData {
    const data = emptyMoRIIOStats();
    if (agent) {
      data.transfer_duration = [...agent.transferDuration];
      data.post_duration = [...agent.postDuration];
      data.bytes_transferred = [...agent.bytesTransferred];
      data.num_descriptors = [...agent.numDescriptors];
      data.num_failed_transfers = agent.numFailedTransfers;
      data.num_failed_notifications = agent.numFailedNotifications;
    }
    data.num_failed_transfers += this.#failedTransfers;
    data.num_failed_notifications += this.#failedNotifications;
    data.num_transfer_timeouts = this.#timeouts;
    this.#failedTransfers = 0;
    this.#failedNotifications = 0;
    this.#timeouts = 0;
    return data;
  }
}

const sum = (v: readonly number[]): number => v.reduce((a, b) => a + b, 0);

/** A one-line summary for logs and tools: transfers, bytes, time, throughput, failures. */
export function reduceMoRIIOStats(d: MoRIIOStatsData): Record<string, number> {
  const bytes = sum(d.bytes_transferred);
  const seconds = sum(d.transfer_duration);
  const n = d.transfer_duration.length;
  const round = (x: number): number => Math.round(x * 1000) / 1000;
  return {
    'Num successful transfers': n,
    'Total MB transferred': round(bytes / 1e6),
    'Avg xfer time (ms)': round(n > 0 ? (seconds / n) * 1000 : 0),
    'Throughput (MB/s)': round(seconds > 0 ? bytes / 1e6 / seconds : 0),
    'Num failed transfers': d.num_failed_transfers,
    'Num failed notifications': d.num_failed_notifications,
    'Num transfer timeouts': d.num_transfer_timeouts,
  };
}
