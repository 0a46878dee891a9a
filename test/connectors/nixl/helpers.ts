/** Shared helpers of the NIXL tests: engine pairs in one process, prompts, idle checks. */
import assert from 'node:assert/strict';
import { LLM, type LLMOptions } from '../../../src/engine/llm.ts';

export const PROMPTS = [
  'The quick brown fox jumps over the lazy dog and keeps running far away from the hunters.',
  'A short one.',
  'Disaggregated prefill moves the KV cache of a long prompt from one engine to another engine directly.',
];
export const GREEDY = { maxTokens: 6, temperature: 0, ignoreEos: true };

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

export async function plainOutputs(model: string, prompts = PROMPTS): Promise<number[][]> {
  const llm = await LLM.create({ model, num_gpu_blocks: 64, max_model_len: 256 });
  try {
    return (await llm.generate(prompts, GREEDY)).map((o) => o.tokenIds);
  } finally {
    await llm.shutdown();
  }
}

export const P_PARAMS = {
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: null,
  remote_block_ids: null,
  remote_host: null,
  remote_port: null,
};

/** Waits until the engine holds no blocks and no hand-off (bounded). */
export async function waitForEmptyPool(llm: LLM, timeoutMs = 5000): Promise<void> {
  const engine = await llm.engine();
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    await llm.waitIdle();
    if (engine.engine.schedulerStats().kvCacheUsage === 0 && !engine.engine.hasWork()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.equal(engine.engine.schedulerStats().kvCacheUsage, 0, 'the block pool returns to empty');
}
