export type { ModelDims, RankShard } from './dims.ts';
export type { ForwardBatch, ForwardHooks, ForwardModel, SequenceInBatch } from './forward-batch.ts';
export { LlamaModel } from './llama.ts';
export {
  type LoadModelOptions,
  loadModel,
  loadModelConfig,
  loadModelTensors,
  modelFromTensors,
} from './load.ts';
export { SeededRandom } from './prng.ts';
export { readSafetensorsFile, tensorToFloat32, writeSafetensorsFile } from './safetensors.ts';
export { generatePresetTensors, type TensorMap, tensorsDigest, writeCheckpointDir } from './weights.ts';
