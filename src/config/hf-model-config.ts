/**
 * A HF `config.json` checked and normalized to what kvconnect's decoder runs: model_type
 * llama / mistral / qwen2, `layer_types` derived with each architecture's sliding-window
 * rule, `rope_scaling` (default, linear, llama3) validated. Anything the decoder would
 * silently compute differently from transformers is refused here, naming the field.
 */
import { KVError } from '../errors/kv-error.ts';
import { describeValue } from './config-error.ts';
import type { HFModelConfig, LayerType } from './model-presets.ts';

export const SUPPORTED_MODEL_TYPES = ['llama', 'mistral', 'qwen2'] as const;
export const SUPPORTED_ROPE_TYPES = ['default', 'linear', 'llama3'] as const;

export type RopeScaling =
  | { ropeType: 'default' }
  | { ropeType: 'linear'; factor: number }
  | {
      ropeType: 'llama3';
      factor: number;
      lowFreqFactor: number;
      highFreqFactor: number;
      originalMaxPositionEmbeddings: number;
    };

type Raw = Record<string, unknown>;

function fail(
  code: 'MODEL_UNSUPPORTED' | 'KV_MODEL_CONFIG_INVALID',
  source: string,
  field: string,
  expected: string,
  received: unknown,
  hint: string,
): KVError {
  const what = code === 'MODEL_UNSUPPORTED' ? 'Unsupported model' : 'Invalid model config';
  return new KVError(
    code,
    `${what} in ${source}: ${field} is ${describeValue(received)}, expected ${expected}`,
    { field: `model.${field}`, hint, details: { expected, received: describeValue(received) } },
  );
}

function positiveNumber(raw: Raw, key: string, source: string, field = key): number {
  const v = raw[key];
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) {
    throw fail(
      'KV_MODEL_CONFIG_INVALID',
      source,
      field,
      'a positive number',
      v,
      `Set ${field} in config.json.`,
    );
  }
  return v;
}

/** rope_scaling (or transformers v5's rope_parameters) → a validated RoPE variant. */
export function parseRopeScaling(config: HFModelConfig, source = 'config.json'): RopeScaling {
  const raw = config.rope_scaling ?? config.rope_parameters ?? null;
  const base = config.rope_scaling != null ? 'rope_scaling' : 'rope_parameters';
  if (raw === null) return { ropeType: 'default' };
  if (typeof raw !== 'object' || Array.isArray(raw)) {
    throw fail(
      'KV_MODEL_CONFIG_INVALID',
      source,
      base,
      'an object or null',
      raw,
      `Fix ${base} in config.json.`,
    );
  }
  const r = raw as Raw;
  const type = r.rope_type ?? r.type ?? 'default';
  const field = `${base}.${r.rope_type === undefined && r.type !== undefined ? 'type' : 'rope_type'}`;
  if (type === 'default') return { ropeType: 'default' };
  if (type === 'linear')
    return { ropeType: 'linear', factor: positiveNumber(r, 'factor', source, `${base}.factor`) };
  if (type === 'llama3') {
    const scaling = {
      ropeType: 'llama3' as const,
      factor: positiveNumber(r, 'factor', source, `${base}.factor`),
      lowFreqFactor: positiveNumber(r, 'low_freq_factor', source, `${base}.low_freq_factor`),
      highFreqFactor: positiveNumber(r, 'high_freq_factor', source, `${base}.high_freq_factor`),
      originalMaxPositionEmbeddings: positiveNumber(
        r,
        'original_max_position_embeddings',
        source,
        `${base}.original_max_position_embeddings`,
      ),
    };
    if (scaling.highFreqFactor <= scaling.lowFreqFactor) {
      throw fail(
        'KV_MODEL_CONFIG_INVALID',
        source,
        `${base}.high_freq_factor`,
        `a number greater than low_freq_factor (${scaling.lowFreqFactor})`,
        scaling.highFreqFactor,
        'Llama 3 RoPE scaling interpolates between the two factors; high_freq_factor must be the larger.',
      );
    }
    return scaling;
  }
  throw fail(
    'MODEL_UNSUPPORTED',
    source,
    field,
    `one of ${SUPPORTED_ROPE_TYPES.map((t) => `"${t}"`).join(', ')}`,
    type,
    'kvconnect implements linear and llama3 RoPE scaling; use a checkpoint without other scaling types.',
  );
}

function layerTypesOf(c: HFModelConfig, source: string): { types: LayerType[]; window: number | null } {
  const n = c.num_hidden_layers;
  const window = typeof c.sliding_window === 'number' ? c.sliding_window : null;
  if (Array.isArray(c.layer_types)) return { types: c.layer_types, window };
  if (c.model_type === 'mistral' && window !== null)
    return { types: Array<LayerType>(n).fill('sliding_attention'), window };
  if (c.model_type === 'qwen2' && c.use_sliding_window === true && window !== null) {
    const first = c.max_window_layers ?? n;
    if (typeof first !== 'number' || !Number.isInteger(first) || first < 0) {
      throw fail(
        'KV_MODEL_CONFIG_INVALID',
        source,
        'max_window_layers',
        'a non-negative integer',
        first,
        'Fix config.json.',
      );
    }
    return {
      types: Array.from({ length: n }, (_, i) => (i >= first ? 'sliding_attention' : 'full_attention')),
      window,
    };
  }
  return { types: Array<LayerType>(n).fill('full_attention'), window: null };
}

/**
 * Checks what the decoder cannot run and fills `layer_types`; returns a new config.
 * `source` names the file in messages.
 */
export function normalizeHFConfig(config: HFModelConfig, source = 'config.json'): HFModelConfig {
  const c = config as HFModelConfig & Raw;
  const modelType = c.model_type;
  if (!(SUPPORTED_MODEL_TYPES as readonly unknown[]).includes(modelType)) {
    throw fail(
      'MODEL_UNSUPPORTED',
      source,
      'model_type',
      `one of ${SUPPORTED_MODEL_TYPES.map((t) => `"${t}"`).join(', ')}`,
      modelType,
      'kvconnect runs Llama-family decoders (llama, mistral, qwen2); convert the checkpoint or pick another model.',
    );
  }
  const unsupported = (field: string, expected: string, received: unknown, hint: string) =>
    fail('MODEL_UNSUPPORTED', source, field, expected, received, hint);
  if ((c.hidden_act ?? 'silu') !== 'silu') {
    throw unsupported(
      'hidden_act',
      '"silu"',
      c.hidden_act,
      'The MLP is SwiGLU (silu); other activations are not implemented.',
    );
  }
  if (c.attention_bias === true) {
    throw unsupported(
      'attention_bias',
      'false',
      true,
      'Attention biases are implemented for qwen2 (q/k/v) only.',
    );
  }
  if (c.mlp_bias === true) throw unsupported('mlp_bias', 'false', true, 'MLP biases are not implemented.');
  if (c.quantization_config !== undefined && c.quantization_config !== null) {
    throw unsupported(
      'quantization_config',
      'absent',
      c.quantization_config,
      'Use unquantized F32/F16/BF16 weights.',
    );
  }
  const partial = c.partial_rotary_factor ?? 1;
  if (partial !== 1) {
    throw unsupported(
      'partial_rotary_factor',
      '1',
      partial,
      'Partial rotary embeddings are not implemented.',
    );
  }
  parseRopeScaling(config, source);
  const { types, window } = layerTypesOf(config, source);
  const theta = c.rope_theta ?? (c.rope_parameters as Raw | undefined)?.rope_theta;
  return {
    ...config,
    layer_types: types,
    sliding_window: window,
    ...(typeof theta === 'number' ? { rope_theta: theta } : {}),
  };
}
