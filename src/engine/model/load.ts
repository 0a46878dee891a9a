/**
 * loadModel: a built-in model name or a HF checkpoint directory → one rank's LlamaModel.
 */
import { availableParallelism } from 'node:os';
import { MAX_NUM_THREADS } from '../../config/engine-options.ts';
import { readModelSource } from '../../config/model-info.ts';
import { getModelPreset, type HFModelConfig } from '../../config/model-presets.ts';
import type { ModelDtype, ParallelConfig } from '../../config/types.ts';
import { readCheckpointTensors } from './checkpoint.ts';
import { modelDims, rankShard } from './dims.ts';
import { LlamaModel } from './llama.ts';
import { generatePresetTensors, type TensorMap } from './weights.ts';

export interface LoadModelOptions {
  /** This process's tensor-parallel rank (default 0). */
  tpRank?: number;
  /** Number of tensor-parallel ranks (default 1). */
  tpSize?: number;
  /** The weights' dtype (default auto: as the checkpoint stores each tensor). */
  dtype?: ModelDtype;
  /** Threads of one forward's matmuls (default 1). */
  threads?: number;
}

/**
 * Threads of one rank's matmuls: `--num-threads`, else this machine's available parallelism
 * shared by the tensor-parallel ranks and the data-parallel engines started on it.
 */
export function rankThreads(parallel: ParallelConfig): number {
  if (parallel.numThreads) return parallel.numThreads;
  const sharers = parallel.tensorParallelSize * Math.max(1, parallel.dataParallelSizeLocal);
  return Math.max(1, Math.min(MAX_NUM_THREADS, Math.floor(availableParallelism() / sharers)));
}

/** The HF config and full (unsharded) float32 weights of a preset or checkpoint directory. */
export function loadModelTensors(modelNameOrDir: string): { config: HFModelConfig; tensors: TensorMap } {
  const preset = getModelPreset(modelNameOrDir);
  if (preset !== undefined) return { config: preset.config, tensors: generatePresetTensors(preset) };
  const { directory, hfConfig } = readModelSource(modelNameOrDir);
  return { config: hfConfig, tensors: readCheckpointTensors(directory!, modelDims(hfConfig)) };
}

/** The config of a preset or checkpoint directory, without loading weights. */
export function loadModelConfig(modelNameOrDir: string): HFModelConfig {
  return readModelSource(modelNameOrDir).hfConfig;
}

export function loadModel(modelNameOrDir: string, options: LoadModelOptions = {}): LlamaModel {
  const { config, tensors } = loadModelTensors(modelNameOrDir);
  return modelFromTensors(config, tensors, options);
}

export function modelFromTensors(
  config: HFModelConfig,
  tensors: TensorMap,
  options: LoadModelOptions = {},
): LlamaModel {
  const dims = modelDims(config);
  const shard = rankShard(dims, options.tpRank ?? 0, options.tpSize ?? 1);
  return new LlamaModel(dims, shard, tensors, {
    ...(options.dtype !== undefined ? { dtype: options.dtype } : {}),
    ...(options.threads !== undefined ? { threads: options.threads } : {}),
  });
}
