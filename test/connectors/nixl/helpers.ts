/** Shared helpers of the NIXL tests: engine options of a P/D pair, P's request params. */
import type { LLMOptions } from '../../../src/engine/llm.ts';
import { NIXL_PREFILL_REQUEST } from '../../../src/wire/index.ts';

export interface PairOptions {
  model: string;
  connector: 'NixlConnector' | 'NixlPushConnector';
  backend: 'TCP' | 'SHM';
  extra?: Record<string, unknown>;
  consumerExtra?: Record<string, unknown>;
  policy?: 'fail' | 'recompute';
  numBlocks?: number;
}

export function engineOptions(
  o: PairOptions,
  role: 'kv_producer' | 'kv_consumer',
  engineId: string,
): LLMOptions {
  return {
    model: o.model,
    num_gpu_blocks: o.numBlocks ?? 64,
    max_model_len: 256,
    kvTransferConfig: {
      kv_connector: o.connector,
      kv_role: role,
      engine_id: engineId,
      kv_load_failure_policy: o.policy ?? 'fail',
      kv_connector_extra_config: {
        backends: [o.backend],
        side_channel_port: 0,
        ...o.extra,
        ...(role === 'kv_consumer' ? o.consumerExtra : {}),
      },
    },
  };
}

/** What the proxy sends P in the NIXL flows. */
export const P_PARAMS = { ...NIXL_PREFILL_REQUEST };
