/**
 * Builds vLLM's KVCacheConfig for one tensor-parallel rank from a HF model config: specs per
 * layer, grouping of hybrid models into equal-size groups that share tensors
 * (docs/kv-cache.md#config-buildkvcacheconfigoptions), promotion of sliding layers to full
 * attention when HMA is off (docs/configuration.md#hybrid-kv-cache-manager-hma), and sizing.
 */
import type { HFModelConfig } from '../config/model-presets.ts';
import { attentionLayerName } from '../config/model-presets.ts';
import type { KVCacheDtype } from '../config/types.ts';
import { KVError } from '../errors/index.ts';
import { getLogger } from '../logging/logger.ts';
import type { KVCacheConfig, KVCacheGroupSpec, KVCacheSpec, KVCacheTensor } from './interfaces.ts';
import {
  type AttentionGeometry,
  fullAttentionSpec,
  maxBlocksPerRequest,
  slidingWindowSpec,
  specKey,
} from './specs.ts';

const log = getLogger('kvconnect.kv.kv-cache-config');

export const HMA_DISABLED_WARNING =
  'Hybrid KV cache manager is disabled for this hybrid model, This means we do not enable any optimizations ' +
  'for saving KV cache memory (e.g., dropping the KV cache outside the sliding window). The compute of layers ' +
  'like sliding window is still saved.';

export interface BuildKVCacheConfigOptions {
  hfConfig: HFModelConfig;
  /** Tokens per block. Default 16. */
  blockSize?: number;
  /** Default 'float32'. */
  dtype?: KVCacheDtype;
  /** Total blocks including the null block 0; wins over `memoryBytes`. */
  numBlocks?: number | null;
  /** KV memory budget of this rank in bytes (all tensors together). */
  memoryBytes?: number | null;
  /** Hybrid memory allocator (one group per layer type). Default true. */
  hybridEnabled?: boolean;
  /** Default 1. */
  tensorParallelSize?: number;
  /** Longest request the cache must hold. Default `hfConfig.max_position_embeddings`. */
  maxModelLen?: number;
  /** Tokens per scheduling step, bounds sliding-window usage. Default `maxModelLen`. */
  maxNumBatchedTokens?: number;
}

export function kvHeadsPerRank(hf: HFModelConfig, tp: number): number {
  if (!Number.isInteger(tp) || tp < 1) {
    throw new KVError('KV_INVALID_SPEC', `tensor_parallel_size must be a positive integer, got ${tp}`, {
      field: 'parallel.tensor_parallel_size',
      hint: 'Use --tensor-parallel-size 1 or more.',
    });
  }
  const heads = hf.num_key_value_heads;
  if (tp >= heads) {
    if (tp % heads !== 0) throw tpMismatch(heads, tp);
    return 1; // each rank holds a replica of one KV head
  }
  if (heads % tp !== 0) throw tpMismatch(heads, tp);
  return heads / tp;
}

function tpMismatch(heads: number, tp: number): KVError {
  return new KVError(
    'KV_TP_MISMATCH',
    `num_key_value_heads (${heads}) and tensor_parallel_size (${tp}) are not compatible`,
    {
      field: 'parallel.tensor_parallel_size',
      hint: 'Use a tensor-parallel size that divides the KV head count, or a multiple of it.',
    },
  );
}

function layerSpecs(opts: BuildKVCacheConfigOptions, g: AttentionGeometry): KVCacheSpec[] {
  const hf = opts.hfConfig;
  const types = hf.layer_types ?? Array(hf.num_hidden_layers).fill('full_attention');
  if (types.length !== hf.num_hidden_layers) {
    throw new KVError(
      'KV_INVALID_SPEC',
      `layer_types has ${types.length} entries but num_hidden_layers is ${hf.num_hidden_layers}`,
      { field: 'model.layer_types', hint: 'Fix the model config.json so both agree.' },
    );
  }
  return types.map((t) => {
    if (t === 'full_attention') return fullAttentionSpec(g);
    const window = hf.sliding_window;
    if (window === undefined || window === null) {
      throw new KVError(
        'KV_INVALID_SPEC',
        'sliding_attention layers need sliding_window in the model config',
        {
          field: 'model.sliding_window',
          hint: 'Set sliding_window (tokens) in config.json.',
        },
      );
    }
    return slidingWindowSpec(g, window);
  });
}

/** vLLM's grouping: layers of one type are split into groups of the smallest type's count. */
function groupLayers(names: string[], specs: KVCacheSpec[]): KVCacheGroupSpec[] {
  const byType = new Map<string, { spec: KVCacheSpec; layers: string[] }>();
  specs.forEach((spec, i) => {
    const key = specKey(spec);
    const entry = byType.get(key) ?? { spec, layers: [] };
    entry.layers.push(names[i]!);
    byType.set(key, entry);
  });
  if (byType.size === 1) {
    const only = [...byType.values()][0]!;
    return [{ layerNames: only.layers, spec: only.spec }];
  }
  const groupSize = Math.min(...[...byType.values()].map((e) => e.layers.length));
  const groups: KVCacheGroupSpec[] = [];
  for (const { spec, layers } of byType.values()) {
    for (let i = 0; i < layers.length; i += groupSize) {
      groups.push({ layerNames: layers.slice(i, i + groupSize), spec });
    }
  }
  return groups;
}

function tensorsOf(groups: KVCacheGroupSpec[], bytesPerTensor: number): KVCacheTensor[] {
  if (groups.length === 1)
    return groups[0]!.layerNames.map((name) => ({ size: bytesPerTensor, sharedBy: [name] }));
  const perGroup = Math.max(...groups.map((g) => g.layerNames.length));
  const tensors: KVCacheTensor[] = [];
  for (let i = 0; i < perGroup; i++) {
    const sharedBy = groups.flatMap((g) => (i < g.layerNames.length ? [g.layerNames[i]!] : []));
    tensors.push({ size: bytesPerTensor, sharedBy });
  }
  return tensors;
}

/** Blocks (null block excluded) one request of `maxModelLen` tokens needs across groups. */
export function blocksForOneRequest(
  groups: readonly KVCacheGroupSpec[],
  maxModelLen: number,
  maxNumBatchedTokens = maxModelLen,
): number {
  return groups.reduce((sum, g) => sum + maxBlocksPerRequest(g.spec, maxModelLen, maxNumBatchedTokens), 0);
}

export function buildKVCacheConfig(opts: BuildKVCacheConfigOptions): KVCacheConfig {
  const hf = opts.hfConfig;
  const geometry: AttentionGeometry = {
    blockSize: opts.blockSize ?? 16,
    numKvHeads: kvHeadsPerRank(hf, opts.tensorParallelSize ?? 1),
    headSize: hf.head_dim ?? hf.hidden_size / hf.num_attention_heads,
    dtype: opts.dtype ?? 'float32',
  };
  const names = Array.from({ length: hf.num_hidden_layers }, (_, i) => attentionLayerName(i));
  let specs = layerSpecs(opts, geometry);
  const hybrid = new Set(specs.map((s) => s.kind)).size > 1;
  if (hybrid && opts.hybridEnabled === false) {
    log.warn(HMA_DISABLED_WARNING);
    // One merged full-attention spec; it keeps the window so attention still masks it.
    const merged = fullAttentionSpec(geometry, hf.sliding_window ?? null);
    specs = specs.map(() => merged);
  }
  const groups = groupLayers(names, specs);
  const pageSize = groups[0]!.spec.pageSizeBytes;
  const numTensors = tensorsOf(groups, 0).length;
  const maxModelLen = opts.maxModelLen ?? hf.max_position_embeddings;
  const needed = blocksForOneRequest(groups, maxModelLen, opts.maxNumBatchedTokens ?? maxModelLen);
  const numBlocks = resolveNumBlocks(opts, pageSize * numTensors, needed, maxModelLen);
  return { numBlocks, tensors: tensorsOf(groups, numBlocks * pageSize), groups };
}

function resolveNumBlocks(
  opts: BuildKVCacheConfigOptions,
  bytesPerBlock: number,
  needed: number,
  maxModelLen: number,
): number {
  const explicit = opts.numBlocks ?? null;
  const budget = opts.memoryBytes ?? null;
  if (explicit === null && budget === null) {
    throw new KVError('KV_CACHE_SIZE_MISSING', 'KV cache size is not set: give numBlocks or memoryBytes', {
      field: 'cache.kv_cache_memory_bytes',
      hint: 'Set --kv-cache-memory-bytes (e.g. 256MiB) or --num-gpu-blocks.',
    });
  }
  const numBlocks = explicit ?? Math.floor(budget! / bytesPerBlock);
  if (!Number.isInteger(numBlocks) || numBlocks - 1 < needed) {
    const field = explicit !== null ? 'cache.num_gpu_blocks' : 'cache.kv_cache_memory_bytes';
    const neededBytes = (needed + 1) * bytesPerBlock;
    throw new KVError(
      'KV_CACHE_TOO_SMALL',
      `To serve at least one request with the model's max seq len (${maxModelLen}), ${needed + 1} KV blocks ` +
        `(${neededBytes} bytes) are needed, but the KV cache has ${numBlocks} blocks ` +
        `(${numBlocks * bytesPerBlock} bytes; block 0 is the reserved null block).`,
      {
        field,
        hint:
          explicit !== null
            ? `Raise --num-gpu-blocks to at least ${needed + 1}, or lower --max-model-len.`
            : `Raise --kv-cache-memory-bytes to at least ${neededBytes}, or lower --max-model-len.`,
        details: { neededBlocks: needed + 1, numBlocks, bytesPerBlock },
      },
    );
  }
  return numBlocks;
}

/** Bytes one block id occupies across all tensors of a rank. */
export function bytesPerBlock(config: KVCacheConfig): number {
  return config.tensors.length * (config.groups[0]?.spec.pageSizeBytes ?? 0);
}
