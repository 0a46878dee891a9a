/**
 * A SmolLM2-135M-shaped checkpoint: HuggingFaceTB/SmolLM2-135M's config.json as published,
 * with deterministic random weights (the engine's seeded generator) stored as bfloat16 like
 * the real checkpoint. No tokenizer.json: text would be UTF-8 bytes, but the bench feeds
 * token ids. What the random model generates is meaningless; its cost per token is the real
 * model's.
 */
import type { HFModelConfig } from '../src/config/model-presets.ts';
import { generatePresetTensors, writeCheckpointDir } from '../src/engine/model/weights.ts';

/** SmolLM2-135M's config.json, key for key. */
export const SMOLLM2_135M_CONFIG = {
  architectures: ['LlamaForCausalLM'],
  attention_bias: false,
  attention_dropout: 0.0,
  bos_token_id: 0,
  eos_token_id: 0,
  hidden_act: 'silu',
  hidden_size: 576,
  initializer_range: 0.041666666666666664,
  intermediate_size: 1536,
  is_llama_config: true,
  max_position_embeddings: 8192,
  model_type: 'llama',
  num_attention_heads: 9,
  num_hidden_layers: 30,
  num_key_value_heads: 3,
  pretraining_tp: 1,
  rms_norm_eps: 1e-5,
  rope_interleaved: false,
  rope_scaling: null,
  rope_theta: 100000,
  tie_word_embeddings: true,
  torch_dtype: 'bfloat16',
  transformers_version: '4.40.1',
  use_cache: true,
  vocab_size: 49152,
} as const satisfies HFModelConfig & Record<string, unknown>;

/** Writes config.json and a bfloat16 model.safetensors into `dir` (~270 MB). */
export function writeSmolLM2ShapedCheckpoint(dir: string, seed = 135): void {
  const config = SMOLLM2_135M_CONFIG as unknown as HFModelConfig;
  const tensors = generatePresetTensors({
    name: 'smollm2-135m-shaped',
    description: 'SmolLM2-135M config.json, random weights',
    config,
    weightSeed: seed,
  });
  writeCheckpointDir(dir, config, tensors, 'BF16');
}
