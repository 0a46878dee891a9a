/**
 * The one declarative table of engine options (vLLM names and defaults). CLI flags, help
 * text, defaults and validation of every command that builds an engine config are derived
 * from it, so they cannot drift (the vitest pattern): an option missing from the table is
 * a type error.
 */
import { DEFAULT_MODEL } from './model-presets.ts';
import type { HashAlgo, KVCacheDtype, ModelDtypeName } from './types.ts';

/** Flat engine options, snake_case as vLLM's engine arguments. */
export interface EngineOptions {
  model: string;
  served_model_name: string | null;
  /** null (the default) = the model's max_position_embeddings; resolved before checks. */
  max_model_len: number;
  seed: number;
  dtype: ModelDtypeName;
  block_size: number;
  num_gpu_blocks: number | null;
  kv_cache_memory_bytes: number | null;
  cache_dtype: KVCacheDtype;
  enable_prefix_caching: boolean;
  prefix_caching_hash_algo: HashAlgo;
  kv_offloading_size: number | null;
  kv_offloading_backend: 'native' | 'lmcache';
  max_num_seqs: number;
  max_num_batched_tokens: number;
  enable_chunked_prefill: boolean;
  disable_hybrid_kv_cache_manager: boolean | null;
  tensor_parallel_size: number;
  num_threads: number | null;
  data_parallel_size: number;
  data_parallel_rank: number;
  data_parallel_size_local: number | null;
  enable_lora: boolean;
  max_loras: number;
  max_cpu_loras: number | null;
  max_lora_rank: number;
}

/**
 * How a value is written on the command line: `int` (also human-readable, `64M`), `number`
 * (a decimal), `string`, `choice`, `bool` (`--x` / `--no-x`), `tristate` (`--x` / `--no-x` /
 * absent = auto).
 */
export type EngineOptionKind = 'int' | 'number' | 'string' | 'choice' | 'bool' | 'tristate';

export interface EngineOptionDef<T> {
  kind: EngineOptionKind;
  section: 'model' | 'cache' | 'scheduler' | 'parallel' | 'lora';
  default: T;
  help: string;
  choices?: readonly string[];
  nullable?: boolean;
  /** Smallest allowed value. */
  min?: number;
  /** Values must be above this (exclusive). */
  above?: number;
  /** Returns a problem ("must be ...") or null; `all` is the full option set. */
  check?: (value: T, all: EngineOptions) => string | null;
}

/** vLLM's MaxLoRARanks. */
export const MAX_LORA_RANKS: readonly number[] = [1, 8, 16, 32, 64, 128, 256, 320, 512];

export const DEFAULT_KV_CACHE_MEMORY_BYTES = 64 * 2 ** 20;

/** Most threads one engine rank's matmuls may use (the native pool's size limit). */
export const MAX_NUM_THREADS = 64;

export const ENGINE_OPTIONS: { [K in keyof EngineOptions]: EngineOptionDef<EngineOptions[K]> } = {
  model: {
    kind: 'string',
    section: 'model',
    default: DEFAULT_MODEL,
    help: 'built-in model (kjv-llama, or the random-weight presets tiny, tiny-hybrid, small) or a directory with config.json',
  },
  served_model_name: {
    kind: 'string',
    section: 'model',
    default: null,
    nullable: true,
    help: 'model name reported by the API (default: the model)',
  },
  max_model_len: {
    kind: 'int',
    section: 'model',
    default: null as unknown as number,
    nullable: true,
    min: 1,
    help: "maximum tokens per request (prompt + output); default: the model's max_position_embeddings",
  },
  seed: { kind: 'int', section: 'model', default: 0, min: 0, help: 'random seed of the sampler' },
  dtype: {
    kind: 'choice',
    section: 'model',
    default: 'auto',
    choices: ['auto', 'half', 'float16', 'bfloat16', 'float', 'float32'],
    help: 'data type of the weights (activations and sums stay float32): auto = each tensor as the checkpoint stores it (a float32 checkpoint stays float32); half = float16, float = float32; a half type rounds float32 weights once at load',
  },
  block_size: { kind: 'int', section: 'cache', default: 16, min: 1, help: 'tokens per KV cache block' },
  num_gpu_blocks: {
    kind: 'int',
    section: 'cache',
    default: null,
    nullable: true,
    min: 2,
    help: 'number of KV blocks (block 0 is the null block); wins over --kv-cache-memory-bytes',
  },
  kv_cache_memory_bytes: {
    kind: 'int',
    section: 'cache',
    default: null,
    nullable: true,
    min: 1,
    help: `KV cache budget in bytes, human-readable allowed (64M, 1G); default ${DEFAULT_KV_CACHE_MEMORY_BYTES} (64 MiB) when neither this nor --num-gpu-blocks is set`,
  },
  cache_dtype: {
    kind: 'choice',
    section: 'cache',
    default: 'float32',
    choices: ['float32', 'float16', 'bfloat16'],
    help: 'element type of the KV cache',
  },
  enable_prefix_caching: {
    kind: 'bool',
    section: 'cache',
    default: true,
    help: 'reuse KV blocks of identical prefixes',
  },
  prefix_caching_hash_algo: {
    kind: 'choice',
    section: 'cache',
    default: 'sha256_cbor',
    choices: ['sha256_cbor', 'sha256', 'xxhash_cbor', 'xxhash'],
    help: 'block hash function (sha256_cbor: collision-resistant and language-neutral, so non-Python peers agree on keys)',
  },
  kv_offloading_size: {
    kind: 'number',
    section: 'cache',
    default: null,
    nullable: true,
    above: 0,
    help: "KV offloading buffer in GiB (vLLM's shortcut): sets kv_connector to OffloadingConnector, kv_role kv_both, cpu_bytes_to_use = size × 2^30",
  },
  kv_offloading_backend: {
    kind: 'choice',
    section: 'cache',
    default: 'native',
    choices: ['native', 'lmcache'],
    help: 'backend of --kv-offloading-size: native = the OffloadingConnector (lmcache is not available in kvconnect)',
  },
  max_num_seqs: {
    kind: 'int',
    section: 'scheduler',
    default: 64,
    min: 1,
    help: 'maximum running requests per step',
  },
  max_num_batched_tokens: {
    kind: 'int',
    section: 'scheduler',
    default: 2048,
    min: 1,
    help: 'maximum tokens scheduled per step',
    check: (v, all) =>
      !all.enable_chunked_prefill && v < all.max_model_len
        ? `must be >= max_model_len (${all.max_model_len}) when chunked prefill is disabled`
        : null,
  },
  enable_chunked_prefill: {
    kind: 'bool',
    section: 'scheduler',
    default: true,
    help: 'split long prompts across steps',
  },
  disable_hybrid_kv_cache_manager: {
    kind: 'tristate',
    section: 'scheduler',
    default: null,
    nullable: true,
    help: 'hybrid KV cache manager (HMA): --disable-... turns it off, --no-disable-... forces it on, absent = auto (off when the KV connector does not support it)',
  },
  tensor_parallel_size: {
    kind: 'int',
    section: 'parallel',
    default: 1,
    min: 1,
    help: 'tensor-parallel workers per engine',
  },
  num_threads: {
    kind: 'int',
    section: 'parallel',
    default: null,
    nullable: true,
    min: 1,
    help: "threads computing one rank's matmuls (llama.cpp's --threads); default: the machine's available parallelism divided by tensor_parallel_size × data_parallel_size_local; the logits do not depend on it",
    check: (v) => (v !== null && v > MAX_NUM_THREADS ? `must be at most ${MAX_NUM_THREADS}` : null),
  },
  data_parallel_size: {
    kind: 'int',
    section: 'parallel',
    default: 1,
    min: 1,
    help: 'number of data-parallel engines',
  },
  data_parallel_rank: {
    kind: 'int',
    section: 'parallel',
    default: 0,
    min: 0,
    help: 'global rank of this data-parallel engine',
    check: (v, all) =>
      v >= all.data_parallel_size ? `must be < data_parallel_size (${all.data_parallel_size})` : null,
  },
  data_parallel_size_local: {
    kind: 'int',
    section: 'parallel',
    default: null,
    nullable: true,
    min: 0,
    help: 'data-parallel engines on this node (default: data_parallel_size; 0 = external DP)',
    check: (v, all) =>
      v !== null && v > all.data_parallel_size
        ? `must be <= data_parallel_size (${all.data_parallel_size})`
        : null,
  },
  enable_lora: {
    kind: 'bool',
    section: 'lora',
    default: false,
    help: 'serve LoRA adapters (--lora-modules, and POST /v1/load_lora_adapter with VLLM_ALLOW_RUNTIME_LORA_UPDATING)',
  },
  max_loras: {
    kind: 'int',
    section: 'lora',
    default: 1,
    min: 1,
    help: 'most distinct LoRA adapters in one batch (requests of other adapters wait)',
  },
  max_cpu_loras: {
    kind: 'int',
    section: 'lora',
    default: null,
    nullable: true,
    min: 1,
    help: 'most LoRA adapters held in memory; unset: --max-loras',
    check: (v, all) =>
      v !== null && v < all.max_loras ? `max_cpu_loras (${v}) must be >= max_loras (${all.max_loras})` : null,
  },
  max_lora_rank: {
    kind: 'int',
    section: 'lora',
    default: 16,
    help: `largest LoRA rank accepted (one of ${MAX_LORA_RANKS.join(', ')})`,
    check: (v) => (MAX_LORA_RANKS.includes(v) ? null : `must be one of ${MAX_LORA_RANKS.join(', ')}`),
  },
};

export const ENGINE_OPTION_NAMES = Object.keys(ENGINE_OPTIONS) as (keyof EngineOptions)[];

/** `block_size` → `--block-size`. */
export function optionFlag(name: string): string {
  return `--${name.replaceAll('_', '-')}`;
}

export function defaultEngineOptions(): EngineOptions {
  const out = {} as Record<string, unknown>;
  for (const name of ENGINE_OPTION_NAMES) out[name] = ENGINE_OPTIONS[name].default;
  return out as unknown as EngineOptions;
}
