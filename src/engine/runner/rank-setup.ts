/**
 * Builds one tensor-parallel rank: its model shard, its own paged KV memory shard and its
 * worker-side connector (registered on that memory). Used in the engine thread for tp = 1
 * and inside each worker thread for tp > 1.
 */
import type { EngineConfig } from '../../config/types.ts';
import { KVConnectorFactory } from '../../connector/factory.ts';
import type { KVConnectorHandshakeMetadata } from '../../connector/types.ts';
import type { KVCacheConfig } from '../../kv/interfaces.ts';
import { createPagedKVMemory } from '../../kv/paged-memory.ts';
import { loadTokenizer } from '../../tokenizer/load.ts';
import type { TokenizerLike } from '../../tokenizer/types.ts';
import type { ForwardModel } from '../model/forward-batch.ts';
import { loadModel, rankThreads } from '../model/load.ts';
import { StructuredOutputBackend } from '../structured/backend.ts';
import { ModelRunner } from './model-runner.ts';
import { createTokenSampler } from './token-sampler.ts';

export interface RankSetup {
  runner: ModelRunner;
  handshake: KVConnectorHandshakeMetadata | null;
}

/** A rank without weights (emulation): its forward model and where its tokens come from. */
export interface SyntheticRank {
  model: ForwardModel & { vocabSize: number };
  nextToken: (reqId: string) => number;
}

export async function setUpRank(
  engineConfig: EngineConfig,
  kvCacheConfig: KVCacheConfig,
  tpRank: number,
  tpSize: number,
  allReduce?: (x: Float32Array) => void | Promise<void>,
  synthetic?: SyntheticRank,
  tokenizer?: TokenizerLike,
): Promise<RankSetup> {
  const model =
    synthetic?.model ??
    loadModel(engineConfig.model.model, {
      tpRank,
      tpSize,
      dtype: engineConfig.model.dtype ?? 'auto',
      threads: rankThreads(engineConfig.parallel),
    });
  if (engineConfig.lora && 'loras' in model) {
    model.loras.capacity = engineConfig.lora.maxCpuLoras;
    model.loras.maxLoraRank = engineConfig.lora.maxLoraRank;
  }
  const kv = createPagedKVMemory(kvCacheConfig, engineConfig.cache.cacheDtype);
  const connector = engineConfig.kvTransferConfig
    ? await KVConnectorFactory.createConnector(engineConfig, 'worker', kvCacheConfig)
    : null;
  if (connector) await connector.registerKvCaches(kv);
  const runner = new ModelRunner({
    model,
    kv,
    connector,
    sampler: createTokenSampler(),
    vocabSize: model.vocabSize,
    seed: engineConfig.model.seed,
    ...(allReduce ? { allReduce } : {}),
    ...(synthetic
      ? { nextToken: synthetic.nextToken }
      : {
          structured: new StructuredOutputBackend(
            () => tokenizer ?? loadTokenizer(engineConfig.model.model),
            model.vocabSize,
          ),
        }),
  });
  return { runner, handshake: connector?.getHandshakeMetadata() ?? null };
}
