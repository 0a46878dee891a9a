/**
 * Built-in models. Presets are HF-style Llama configs whose weights are generated from a
 * seed at load time (same weights on every machine; `layer_types` marks sliding-window
 * layers). Bundled models are trained checkpoint directories shipped in the package's
 * `models/` folder, addressed by name.
 */
import { fileURLToPath } from 'node:url';

export type LayerType = 'full_attention' | 'sliding_attention';

/** The subset of a HF `config.json` (llama, mistral, qwen2) that kvconnect reads. */
export interface HFModelConfig {
  model_type: string;
  vocab_size: number;
  hidden_size: number;
  intermediate_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  num_key_value_heads: number;
  head_dim?: number;
  max_position_embeddings: number;
  rms_norm_eps: number;
  rope_theta: number;
  tie_word_embeddings: boolean;
  layer_types?: LayerType[];
  sliding_window?: number | null;
  bos_token_id?: number | null;
  eos_token_id?: number | number[] | null;
  rope_scaling?: Record<string, unknown> | null;
  /** transformers v5's name for rope_theta + rope_scaling. */
  rope_parameters?: Record<string, unknown> | null;
  hidden_act?: string;
  attention_bias?: boolean;
  mlp_bias?: boolean;
  /** qwen2: sliding-window layers are those ≥ max_window_layers when use_sliding_window. */
  use_sliding_window?: boolean;
  max_window_layers?: number;
  partial_rotary_factor?: number;
  quantization_config?: unknown;
}

export interface ModelPreset {
  name: string;
  description: string;
  config: HFModelConfig;
  /** Seed of the deterministic weight generator. */
  weightSeed: number;
}

/** Byte-level tokenizer vocabulary: 256 bytes, then BOS and EOS, padded to a multiple of 16. */
export const BYTE_VOCAB_SIZE = 272;
export const BYTE_BOS_TOKEN_ID = 256;
export const BYTE_EOS_TOKEN_ID = 257;

const tinyBase: HFModelConfig = {
  model_type: 'llama',
  vocab_size: BYTE_VOCAB_SIZE,
  hidden_size: 256,
  intermediate_size: 768,
  num_hidden_layers: 4,
  num_attention_heads: 8,
  num_key_value_heads: 2,
  head_dim: 32,
  max_position_embeddings: 4096,
  rms_norm_eps: 1e-5,
  rope_theta: 10000,
  tie_word_embeddings: true,
  bos_token_id: BYTE_BOS_TOKEN_ID,
  eos_token_id: BYTE_EOS_TOKEN_ID,
};

export const MODEL_PRESETS: Readonly<Record<string, ModelPreset>> = {
  tiny: {
    name: 'tiny',
    description: '4 layers, hidden 256, 8 heads / 2 KV heads (GQA); fast enough for tests',
    config: { ...tinyBase, layer_types: Array(4).fill('full_attention') as LayerType[] },
    weightSeed: 1,
  },
  'tiny-hybrid': {
    name: 'tiny-hybrid',
    description: 'tiny with 2 full-attention + 4 sliding-window (window 32) layers: two KV cache groups',
    config: {
      ...tinyBase,
      num_hidden_layers: 6,
      layer_types: [
        'full_attention',
        'sliding_attention',
        'sliding_attention',
        'full_attention',
        'sliding_attention',
        'sliding_attention',
      ],
      sliding_window: 32,
    },
    weightSeed: 2,
  },
  small: {
    name: 'small',
    description: '12 layers, hidden 768, 12 heads / 4 KV heads (GQA); for benchmarks',
    config: {
      ...tinyBase,
      hidden_size: 768,
      intermediate_size: 2048,
      num_hidden_layers: 12,
      num_attention_heads: 12,
      num_key_value_heads: 4,
      head_dim: 64,
      layer_types: Array(12).fill('full_attention') as LayerType[],
    },
    weightSeed: 3,
  },
};

/** The default model of `serve`, `demo` and the end-to-end tests. */
export const DEFAULT_MODEL = 'kjv-llama';

/** Trained checkpoints in the package's models/ folder (same path from src/ and dist/). */
const BUNDLED_MODELS: Readonly<Record<string, string>> = {
  'kjv-llama': '../../models/kjv-llama',
};

export function bundledModelNames(): string[] {
  return Object.keys(BUNDLED_MODELS);
}

/** A bundled model's name → its directory; anything else is returned unchanged. */
export function resolveModelPath(modelNameOrDir: string): string {
  const rel = Object.hasOwn(BUNDLED_MODELS, modelNameOrDir) ? BUNDLED_MODELS[modelNameOrDir] : undefined;
  return rel === undefined ? modelNameOrDir : fileURLToPath(new URL(rel, import.meta.url));
}

export function getModelPreset(name: string): ModelPreset | undefined {
  return Object.hasOwn(MODEL_PRESETS, name) ? MODEL_PRESETS[name] : undefined;
}

/** True if the model mixes full and sliding-window attention (two or more KV cache groups). */
export function isHybridModelConfig(config: HFModelConfig): boolean {
  const types = config.layer_types ?? [];
  return types.includes('sliding_attention') && types.includes('full_attention');
}

/** Layer names as vLLM names attention layers; KV memory and connectors key on them. */
export function attentionLayerName(layerIndex: number): string {
  return `model.layers.${layerIndex}.self_attn.attn`;
}
