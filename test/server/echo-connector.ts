/**
 * A real external connector (loaded through kv_connector_module_path) for the server tests:
 * it moves no KV, but returns kv_transfer_params from requestFinished like a prefill-side
 * connector does, reports worker stats (feeding the metric its class declares), and records
 * what it saw.
 */
import { KVConnectorBase } from '../../src/connector/base.ts';
import type { ConnectorMetricSpec } from '../../src/connector/metric-specs.ts';
import type {
  ConnectorRequest,
  KVConnectorMetadata,
  KVConnectorStatsData,
  MatchedTokens,
  RequestFinishedResult,
} from '../../src/connector/types.ts';

export interface FinishedRecord {
  requestId: string;
  status: string;
  params: Record<string, unknown> | null;
}

/** Every requestFinished call in this process (scheduler side). */
export const finishedRecords: FinishedRecord[] = [];

type EchoStats = {
  steps_saved: number[];
};

export class EchoParamsConnector extends KVConnectorBase {
  static override metricSpecs(): readonly ConnectorMetricSpec<EchoStats>[] {
    return [
      {
        name: 'kvconnect:echo_steps_saved',
        help: 'Steps the echo connector saw.',
        type: 'histogram',
        key: 'steps_saved',
        buckets: [1, 2, 4, 8],
      },
    ];
  }

  #steps = 0;

  override startLoadKv(): void {}
  override waitForLayerLoad(): void {}
  override saveKvLayer(): void {}
  override waitForSave(): void {
    this.#steps++;
  }

  override getKvConnectorStats(): KVConnectorStatsData | null {
    if (this.#steps === 0) return null;
    const stats: EchoStats = { steps_saved: [this.#steps] };
    this.#steps = 0;
    return stats;
  }

  override getNumNewMatchedTokens(): MatchedTokens {
    return { count: 0, loadAsync: false };
  }

  override updateStateAfterAlloc(): void {}

  override buildConnectorMeta(): KVConnectorMetadata {
    return {};
  }

  override requestFinished(request: ConnectorRequest): RequestFinishedResult {
    finishedRecords.push({
      requestId: request.requestId,
      status: request.status,
      params: request.kvTransferParams,
    });
    return {
      delayFree: false,
      kvTransferParams: {
        echo_request_id: request.requestId,
        num_prompt_tokens: request.numPromptTokens,
        received: request.kvTransferParams,
      },
    };
  }
}
