/**
 * Builds the EngineConfig every layer reads from flat, vLLM-named options (see the table in
 * ./engine-options.ts), validating each with a KVError that names the option.
 */
import { KVError } from '../errors/kv-error.ts';
import { configError, didYouMean } from './config-error.ts';
import {
  DEFAULT_KV_CACHE_MEMORY_BYTES,
  ENGINE_OPTION_NAMES,
  ENGINE_OPTIONS,
  type EngineOptionDef,
  type EngineOptions,
  optionFlag,
} from './engine-options.ts';
import { parseHumanReadableInt } from './human-readable.ts';
import { type KVEventsConfigFields, toKVEventsConfig } from './kv-events-config.ts';
import { applyKvOffloading } from './kv-offloading.ts';
import { KVTransferConfig } from './kv-transfer-config.ts';
import { resolveMaxModelLen } from './model-info.ts';
import type { EngineConfig, KVTransferConfigFields, KVTransferConfigLike } from './types.ts';

export type EngineOptionsInput = Partial<{ [K in keyof EngineOptions]: EngineOptions[K] | string }> & {
  kv_transfer_config?:
    | KVTransferConfigLike
    | Partial<KVTransferConfigFields>
    | Record<string, unknown>
    | string
    | null;
  kv_events_config?: Partial<KVEventsConfigFields> | Record<string, unknown> | string | null;
};

/** Options whose value is a whole config object (JSON on the command line). */
const NESTED_CONFIGS: readonly string[] = ['kv_transfer_config', 'kv_events_config'];

/** Validates the options (applying defaults) and returns them in flat form. */
export function resolveEngineOptions(input: Record<string, unknown>): EngineOptions {
  for (const key of Object.keys(input)) {
    if (!NESTED_CONFIGS.includes(key) && !Object.hasOwn(ENGINE_OPTIONS, key)) {
      const suggestion = didYouMean(key, ENGINE_OPTION_NAMES);
      throw new KVError('KV_CONFIG_UNKNOWN_KEY', `Unknown engine option '${key}'`, {
        field: key,
        hint: `${suggestion ? `${suggestion} ` : ''}Known options: ${[...ENGINE_OPTION_NAMES, ...NESTED_CONFIGS].join(', ')}.`,
      });
    }
  }
  const out = {} as Record<string, unknown>;
  for (const name of ENGINE_OPTION_NAMES) {
    const def = ENGINE_OPTIONS[name] as EngineOptionDef<unknown>;
    const raw = input[name];
    out[name] = raw === undefined ? def.default : coerceOption(name, def, raw);
  }
  const all = out as unknown as EngineOptions;
  all.max_model_len = resolveMaxModelLen(all.model, all.max_model_len as number | null);
  for (const name of ENGINE_OPTION_NAMES) {
    const def = ENGINE_OPTIONS[name] as EngineOptionDef<unknown>;
    const problem = def.check?.(all[name], all);
    if (problem) {
      throw new KVError(
        'KV_CONFIG_INVALID',
        `Invalid value for ${name}: ${problem}, received ${String(all[name])}`,
        {
          field: name,
          hint: `Change ${optionFlag(name)} (${def.help}).`,
        },
      );
    }
  }
  return all;
}

function coerceOption(name: string, def: EngineOptionDef<unknown>, raw: unknown): unknown {
  const flag = optionFlag(name);
  if (raw === null) {
    if (def.nullable) return null;
    throw configError(
      name,
      describeKind(def),
      raw,
      `Remove ${flag} to use the default (${String(def.default)}).`,
    );
  }
  switch (def.kind) {
    case 'int': {
      const n = typeof raw === 'string' ? parseHumanReadableInt(raw, name) : raw;
      if (typeof n !== 'number' || !Number.isSafeInteger(n)) {
        throw configError(
          name,
          describeKind(def),
          raw,
          `Pass a whole number, e.g. ${flag} ${def.default ?? 16}.`,
        );
      }
      if (def.min !== undefined && n < def.min) {
        throw configError(
          name,
          `an integer >= ${def.min}`,
          n,
          `Pass ${flag} with a value of at least ${def.min}.`,
        );
      }
      return n;
    }
    case 'number': {
      const n = typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : raw;
      if (typeof n !== 'number' || !Number.isFinite(n) || (def.above !== undefined && n <= def.above)) {
        throw configError(
          name,
          def.above === undefined ? 'a number' : `a number > ${def.above}`,
          raw,
          `Pass a number, e.g. ${flag} 0.5.`,
        );
      }
      return n;
    }
    case 'string':
      if (typeof raw === 'string' && raw.length > 0) return raw;
      throw configError(name, 'a non-empty string', raw, `Pass ${flag} NAME.`);
    case 'choice':
      if (typeof raw === 'string' && def.choices?.includes(raw)) return raw;
      throw configError(
        name,
        describeKind(def),
        raw,
        `${typeof raw === 'string' ? `${didYouMean(raw, def.choices ?? [])} ` : ''}Choose one of: ${def.choices?.join(', ')}.`.trimStart(),
      );
    case 'bool':
    case 'tristate':
      if (typeof raw === 'boolean') return raw;
      if (raw === 'true' || raw === 'false') return raw === 'true';
      throw configError(name, describeKind(def), raw, `Use ${flag} or --no-${flag.slice(2)}.`);
  }
}

function describeKind(def: EngineOptionDef<unknown>): string {
  const base =
    def.kind === 'int'
      ? 'an integer'
      : def.kind === 'number'
        ? 'a number'
        : def.kind === 'choice'
          ? `one of ${def.choices?.map((c) => `"${c}"`).join(', ')}`
          : def.kind === 'string'
            ? 'a string'
            : 'true or false';
  return def.nullable ? `${base} or null` : base;
}

function toTransferConfig(value: EngineOptionsInput['kv_transfer_config']): KVTransferConfigLike | null {
  if (value === undefined || value === null) return null;
  if (value instanceof KVTransferConfig) return value;
  if (typeof value === 'string') return KVTransferConfig.fromJSON(value);
  if (typeof value === 'object' && 'isKvTransferInstance' in value) return value as KVTransferConfigLike;
  return KVTransferConfig.fromObject(value);
}

/** The engine config for `options` (vLLM names; missing options take their defaults). */
export function buildEngineConfig(options: EngineOptionsInput = {}): EngineConfig {
  const o = resolveEngineOptions(options as Record<string, unknown>);
  const kvCacheMemoryBytes =
    o.kv_cache_memory_bytes ?? (o.num_gpu_blocks === null ? DEFAULT_KV_CACHE_MEMORY_BYTES : null);
  return {
    model: {
      model: o.model,
      servedModelName: o.served_model_name ?? o.model,
      maxModelLen: o.max_model_len,
      seed: o.seed,
      dtype: o.dtype === 'half' ? 'float16' : o.dtype === 'float' ? 'float32' : o.dtype,
    },
    cache: {
      blockSize: o.block_size,
      numGpuBlocks: o.num_gpu_blocks,
      kvCacheMemoryBytes,
      cacheDtype: o.cache_dtype,
      enablePrefixCaching: o.enable_prefix_caching,
      prefixCachingHashAlgo: o.prefix_caching_hash_algo,
      kvOffloadingSize: o.kv_offloading_size,
      kvOffloadingBackend: o.kv_offloading_backend,
    },
    scheduler: {
      maxNumSeqs: o.max_num_seqs,
      maxNumBatchedTokens: o.max_num_batched_tokens,
      enableChunkedPrefill: o.enable_chunked_prefill,
      disableHybridKvCacheManager: o.disable_hybrid_kv_cache_manager,
    },
    parallel: {
      tensorParallelSize: o.tensor_parallel_size,
      numThreads: o.num_threads,
      dataParallelSize: o.data_parallel_size,
      dataParallelRank: o.data_parallel_rank,
      dataParallelSizeLocal: o.data_parallel_size_local ?? o.data_parallel_size,
    },
    kvTransferConfig: applyKvOffloading(
      toTransferConfig(options.kv_transfer_config),
      o.kv_offloading_size,
      o.kv_offloading_backend,
    ),
    kvEventsConfig: toKVEventsConfig(options.kv_events_config),
    lora: o.enable_lora
      ? { maxLoras: o.max_loras, maxCpuLoras: o.max_cpu_loras ?? o.max_loras, maxLoraRank: o.max_lora_rank }
      : null,
  };
}
