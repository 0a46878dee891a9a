/**
 * Resolves `--model` to its HF-style config: a built-in preset, or a directory (relative to
 * the working directory) holding a `config.json`. The one reader of config.json: the engine
 * loads checkpoints through it too, so every caller gets the same checks and error codes.
 */
import { readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { KVError } from '../errors/kv-error.ts';
import { readEnv } from '../util/envs.ts';
import { didYouMean } from './config-error.ts';
import { normalizeHFConfig, parseRopeScaling } from './hf-model-config.ts';
import {
  bundledModelNames,
  getModelPreset,
  type HFModelConfig,
  isHybridModelConfig,
  MODEL_PRESETS,
  resolveModelPath,
} from './model-presets.ts';

export interface ModelInfo {
  name: string;
  source: 'preset' | 'directory';
  /** Absolute directory for `source: 'directory'`. */
  directory: string | null;
  hfConfig: HFModelConfig;
  /** Mixes full and sliding-window attention layers. */
  isHybrid: boolean;
  numFullAttentionLayers: number;
  numSlidingWindowLayers: number;
}

function presetList(): string {
  return [...bundledModelNames(), ...Object.keys(MODEL_PRESETS)].join(', ');
}

export interface ModelSource {
  source: ModelInfo['source'];
  /** Absolute directory for `source: 'directory'`. */
  directory: string | null;
  hfConfig: HFModelConfig;
}

export function resolveModelInfo(model: string, cwd = process.cwd()): ModelInfo {
  const { source, directory, hfConfig } = readModelSource(model, cwd);
  return describe(model, source, directory, hfConfig);
}

/**
 * The model's KV heads over all tensor-parallel ranks (vLLM's get_total_num_kv_heads). A
 * rank's KV spec holds total / tp heads, or one replicated head when tp exceeds the total,
 * so the total cannot be recovered from a rank's spec: it comes from the model config.
 */
export function totalKvHeads(model: string, cwd = process.cwd()): number {
  return readModelSource(model, cwd).hfConfig.num_key_value_heads;
}

/** The preset's config, or the checked config.json of the directory `model` names. */
export function readModelSource(model: string, cwd = process.cwd()): ModelSource {
  const preset = getModelPreset(model);
  if (preset) return { source: 'preset', directory: null, hfConfig: preset.config };
  const dir = path.resolve(cwd, resolveModelPath(model));
  let isDir = false;
  try {
    isDir = statSync(dir).isDirectory();
  } catch {
    isDir = false;
  }
  if (!isDir) {
    const suggestion = didYouMean(model, [...bundledModelNames(), ...Object.keys(MODEL_PRESETS)]);
    throw new KVError('KV_MODEL_NOT_FOUND', `Model '${model}' is neither a preset nor a directory`, {
      field: 'model',
      hint: `${suggestion ? `${suggestion} ` : ''}Use a preset (${presetList()}) or a directory containing config.json.`,
      details: { received: model, resolvedPath: dir },
    });
  }
  const file = path.join(dir, 'config.json');
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new KVError('KV_MODEL_NOT_FOUND', `Model directory '${dir}' has no readable config.json`, {
      field: 'model',
      cause: e,
      hint: `Put a HF-style config.json in ${dir}, or use a preset (${presetList()}).`,
    });
  }
  let config: unknown;
  try {
    config = JSON.parse(text);
  } catch (e) {
    throw new KVError('KV_MODEL_CONFIG_INVALID', `Invalid JSON in ${file}: ${(e as Error).message}`, {
      field: 'model',
      cause: e,
      hint: 'Fix the JSON syntax of config.json.',
    });
  }
  return { source: 'directory', directory: dir, hfConfig: checkHfConfig(config, file) };
}

const REQUIRED_INTS = [
  'vocab_size',
  'hidden_size',
  'intermediate_size',
  'num_hidden_layers',
  'num_attention_heads',
  'num_key_value_heads',
] as const;

function checkHfConfig(config: unknown, file: string): HFModelConfig {
  if (typeof config !== 'object' || config === null || Array.isArray(config)) {
    throw new KVError('KV_MODEL_CONFIG_INVALID', `${file} must contain a JSON object`, {
      field: 'model',
      hint: 'config.json is a HF model config object ({"model_type": "llama", ...}).',
    });
  }
  const c = config as Record<string, unknown>;
  for (const key of REQUIRED_INTS) {
    const v = c[key];
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) {
      throw new KVError(
        'KV_MODEL_CONFIG_INVALID',
        `${file}: ${key} must be a positive integer, received ${JSON.stringify(v)}`,
        {
          field: `model.${key}`,
          hint: `Set "${key}" in config.json (see the presets in docs/configuration.md for a complete example).`,
        },
      );
    }
  }
  return normalizeHFConfig(config as HFModelConfig, file);
}

function describe(
  name: string,
  source: ModelInfo['source'],
  directory: string | null,
  hf: HFModelConfig,
): ModelInfo {
  const types = hf.layer_types ?? [];
  const sliding = types.filter((t) => t === 'sliding_attention').length;
  return {
    name,
    source,
    directory,
    hfConfig: hf,
    isHybrid: isHybridModelConfig(hf),
    numFullAttentionLayers: types.length > 0 ? types.length - sliding : hf.num_hidden_layers,
    numSlidingWindowLayers: sliding,
  };
}

/** The config's max_position_embeddings; 2048 when it has none (transformers' and vLLM's default). */
export function maxPositionEmbeddings(hf: HFModelConfig): number {
  const v = hf.max_position_embeddings;
  return typeof v === 'number' && Number.isSafeInteger(v) && v > 0 ? v : 2048;
}

/**
 * max_model_len as vLLM derives it: the model's max_position_embeddings (times the factor
 * of linear RoPE scaling); a larger explicit value is refused unless
 * VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. An explicit value for a model that cannot be resolved
 * is returned as is (loading the model reports that problem).
 */
export function resolveMaxModelLen(model: string, requested: number | null, cwd = process.cwd()): number {
  let hf: HFModelConfig;
  try {
    hf = resolveModelInfo(model, cwd).hfConfig;
  } catch (e) {
    if (requested !== null) return requested;
    throw e;
  }
  const scaling = parseRopeScaling(hf);
  const derived = maxPositionEmbeddings(hf) * (scaling.ropeType === 'linear' ? scaling.factor : 1);
  if (requested === null) return derived;
  if (requested > derived && !readEnv('VLLM_ALLOW_LONG_MAX_MODEL_LEN')) {
    throw new KVError(
      'KV_CONFIG_INVALID',
      `User-specified max_model_len (${requested}) is greater than the derived max_model_len (max_position_embeddings=${derived} or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model uses absolute position encoding, positions exceeding derived_max_model_len will cause a CUDA array out-of-bounds error.`,
      {
        field: 'max_model_len',
        hint: `Pass --max-model-len ${derived} or less (or omit it to use ${derived}).`,
        details: { expected: `at most ${derived}`, received: requested },
      },
    );
  }
  return requested;
}
