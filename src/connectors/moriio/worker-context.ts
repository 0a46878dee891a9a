/** What the producer and consumer halves of a MoRIIO worker share. */
import type { TransferAgent } from '../../transfer/index.ts';
import type { MoRIIOConfig } from './config.ts';
import type { MoRIIOStatsRecorder } from './stats.ts';

export interface MoRIIOWorkerContext {
  readonly agent: TransferAgent;
  readonly cfg: MoRIIOConfig;
  readonly tpRank: number;
  readonly tpSize: number;
  readonly totalKvHeads: number;
  readonly blockSize: number;
  /** Region (KV tensor) ids, one per layer. */
  readonly regions: readonly number[];
  /** Bytes of one block of each region, by region id. */
  readonly blockBytes: ReadonlyMap<number, number>;
  /** This worker's own listener ports (after the per-worker offset). */
  readonly handshakePort: number;
  readonly notifyPort: number;
  /** Failures outside the agent's own transfers (notify messages, timeouts, failed handshakes). */
  readonly stats: MoRIIOStatsRecorder;
  /** Handshake with a peer worker at host:port (its actual listener); resolves to its agent name. */
  connect(host: string, port: number, remoteTpRank: number, remoteTpSize: number): Promise<string>;
}

/** vLLM's TransferError text for a timed-out transfer (docs/connectors/moriio.md#failures). */
export function transferTimeoutMessage(timeoutS: number): string {
  return `RDMA transfer timed out after ${timeoutS.toFixed(0)}s. Check NIC queue depth or reduce concurrency; adjust with kv_connector_extra_config.transfer_timeout.`;
}
