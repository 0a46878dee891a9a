/**
 * The model's shape read from a HF config, validated, plus the share of it that one
 * tensor-parallel rank holds (query heads, KV heads, MLP columns).
 */
import { normalizeHFConfig, parseRopeScaling, type RopeScaling } from '../../config/hf-model-config.ts';
import type { HFModelConfig, LayerType } from '../../config/model-presets.ts';
import { KVError } from '../../errors/index.ts';

export interface ModelDims {
  vocabSize: number;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  rmsNormEps: number;
  ropeTheta: number;
  ropeScaling: RopeScaling;
  tieWordEmbeddings: boolean;
  /** qwen2: q/k/v projections carry biases. */
  qkvBias: boolean;
  layerTypes: LayerType[];
  slidingWindow: number | null;
}

export interface RankShard {
  tpRank: number;
  tpSize: number;
  /** Global query heads of this rank: [headStart, headStart + numHeads). */
  headStart: number;
  numHeads: number;
  /** Global KV heads of this rank (contiguous), replicated when tpSize > numKvHeads. */
  kvHeadStart: number;
  numKvHeads: number;
  /** MLP columns of this rank: [interStart, interStart + intermediateSize). */
  interStart: number;
  intermediateSize: number;
}

function invalid(problem: string, field: string): KVError {
  return new KVError('KV_MODEL_CONFIG_INVALID', `Invalid model config: ${problem}`, {
    hint: 'Fix config.json next to the weights (a HF Llama-style config is expected).',
    field: `model.${field}`,
  });
}

function positiveInt(config: HFModelConfig, key: keyof HFModelConfig): number {
  const v = config[key];
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) {
    throw invalid(`${key} must be a positive integer, got ${JSON.stringify(v)}`, key);
  }
  return v;
}

export function modelDims(rawConfig: HFModelConfig): ModelDims {
  const config = normalizeHFConfig(rawConfig);
  const hiddenSize = positiveInt(config, 'hidden_size');
  const numHeads = positiveInt(config, 'num_attention_heads');
  const numKvHeads =
    config.num_key_value_heads === undefined ? numHeads : positiveInt(config, 'num_key_value_heads');
  const numLayers = positiveInt(config, 'num_hidden_layers');
  const headDim = config.head_dim ?? hiddenSize / numHeads;
  if (!Number.isSafeInteger(headDim) || headDim <= 0 || headDim % 2 !== 0) {
    throw invalid(`head_dim must be a positive even integer, got ${headDim}`, 'head_dim');
  }
  if (numHeads % numKvHeads !== 0) {
    throw invalid(
      `num_attention_heads (${numHeads}) must be a multiple of num_key_value_heads (${numKvHeads})`,
      'num_key_value_heads',
    );
  }
  const layerTypes = config.layer_types ?? Array<LayerType>(numLayers).fill('full_attention');
  if (
    layerTypes.length !== numLayers ||
    !layerTypes.every((t) => t === 'full_attention' || t === 'sliding_attention')
  ) {
    throw invalid(
      `layer_types must list ${numLayers} entries of full_attention / sliding_attention`,
      'layer_types',
    );
  }
  const slidingWindow = config.sliding_window ?? null;
  if (layerTypes.includes('sliding_attention') && (slidingWindow === null || !(slidingWindow > 0))) {
    throw invalid(
      'sliding_window must be a positive integer when layer_types has sliding_attention',
      'sliding_window',
    );
  }
  return {
    vocabSize: positiveInt(config, 'vocab_size'),
    hiddenSize,
    intermediateSize: positiveInt(config, 'intermediate_size'),
    numLayers,
    numHeads,
    numKvHeads,
    headDim,
    rmsNormEps: config.rms_norm_eps ?? 1e-6,
    ropeTheta: config.rope_theta ?? 10000,
    ropeScaling: parseRopeScaling(config),
    tieWordEmbeddings: config.tie_word_embeddings ?? false,
    qkvBias: config.model_type === 'qwen2',
    layerTypes,
    slidingWindow,
  };
}

export function rankShard(dims: ModelDims, tpRank: number, tpSize: number): RankShard {
  const fail = (problem: string) =>
    new KVError('TP_SIZE_INVALID', `tensor_parallel_size ${tpSize} does not fit the model: ${problem}`, {
      hint: 'Choose a tensor_parallel_size that divides the number of attention heads and KV heads (or is a multiple of the KV heads).',
      field: 'parallel.tensor_parallel_size',
    });
  if (
    !Number.isSafeInteger(tpSize) ||
    tpSize < 1 ||
    !Number.isSafeInteger(tpRank) ||
    tpRank < 0 ||
    tpRank >= tpSize
  ) {
    throw fail(`rank ${tpRank} is not in [0, ${tpSize})`);
  }
  if (dims.numHeads % tpSize !== 0)
    throw fail(`${dims.numHeads} attention heads are not divisible by ${tpSize}`);
  if (dims.intermediateSize % tpSize !== 0)
    throw fail(`intermediate_size ${dims.intermediateSize} is not divisible by ${tpSize}`);
  const numHeads = dims.numHeads / tpSize;
  const headStart = tpRank * numHeads;
  const group = dims.numHeads / dims.numKvHeads;
  let kvHeadStart: number;
  let numKvHeads: number;
  if (tpSize <= dims.numKvHeads) {
    if (dims.numKvHeads % tpSize !== 0)
      throw fail(`${dims.numKvHeads} KV heads are not divisible by ${tpSize}`);
    numKvHeads = dims.numKvHeads / tpSize;
    kvHeadStart = tpRank * numKvHeads;
  } else {
    if (tpSize % dims.numKvHeads !== 0) throw fail(`it is not a multiple of the ${dims.numKvHeads} KV heads`);
    numKvHeads = 1;
    kvHeadStart = Math.floor(headStart / group);
  }
  const intermediateSize = dims.intermediateSize / tpSize;
  return {
    tpRank,
    tpSize,
    headStart,
    numHeads,
    kvHeadStart,
    numKvHeads,
    interStart: tpRank * intermediateSize,
    intermediateSize,
  };
}
