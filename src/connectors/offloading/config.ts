/**
 * OffloadingConnector's `kv_connector_extra_config`
 * (docs/connectors/offloading.md#options-kv_connector_extra_config): vLLM's keys, defaults
 * and error strings; the secondary tiers of TieringOffloadingSpec are parsed in
 * tier-config.ts.
 */
import { CONFIG_INVALID, configError } from '../../config/config-error.ts';
import { type ExtraConfigSchema, type ExtraValues, readExtraConfig } from '../../config/extra-config.ts';
import type { EngineConfig } from '../../config/types.ts';
import { KVError } from '../../errors/kv-error.ts';
import { parseTier, type SecondaryTierSpec } from './tier-config.ts';

export const OFFLOADING_SPECS = ['CPUOffloadingSpec', 'TieringOffloadingSpec'] as const;
export type OffloadingSpecName = (typeof OFFLOADING_SPECS)[number];
export const EVICTION_POLICIES = ['lru', 'arc'] as const;
export type EvictionPolicyName = (typeof EVICTION_POLICIES)[number];
export const STORE_THRESHOLD_TRACKER_SIZE = 64_000;

export interface OffloadingConfig {
  cpuBytesToUse: number;
  /** GPU blocks per offloaded chunk. */
  blocksPerChunk: number;
  /** Tokens per offloaded chunk (blocksPerChunk × GPU block size). */
  offloadBlockSize: number;
  evictionPolicy: EvictionPolicyName;
  storeThreshold: number;
  offloadPromptOnly: boolean;
  specName: OffloadingSpecName;
  secondaryTiers: SecondaryTierSpec[];
}

const FIELD = 'kv_connector_extra_config';

/** OffloadingConnector's keys (docs/connectors/offloading.md), read by the one extra-config reader. */
export const OFFLOADING_EXTRA_CONFIG = {
  connector: 'OffloadingConnector',
  fields: {
    cpu_bytes_to_use: {
      type: 'number',
      min: 0,
      aboveMin: true,
      hint: 'Use a number such as 1073741824 (1 GiB), or in --kv-transfer-config JSON an unquoted human-readable size such as 8G (binary) or 8g (decimal).',
    },
    spec_name: { type: 'custom' },
    block_size: { type: 'integer', min: 1, hint: 'block_size is a token count, e.g. 64.' },
    blocks_per_chunk: { type: 'integer', hint: 'Use e.g. "blocks_per_chunk": 4.' },
    eviction_policy: {
      type: 'string',
      default: 'lru',
      oneOf: EVICTION_POLICIES,
      hint: 'kvconnect implements lru (default) and arc.',
    },
    store_threshold: { type: 'integer', default: 0, min: 0, hint: 'Use 0 (store everything) or N >= 2.' },
    offload_prompt_only: { type: 'boolean', default: true },
    secondary_tiers: { type: 'custom' },
    self_describing_kv_events: {
      type: 'ignored',
      why: 'KV events always carry the medium; the block hashes are the engine-wide ones',
    },
    spec_module_path: { type: 'ignored', why: 'only the built-in specs (spec_name) are available' },
    cache_policy_module_path: { type: 'ignored', why: 'only the built-in eviction policies are available' },
  },
} as const satisfies ExtraConfigSchema;

type OffloadingValues = ExtraValues<typeof OFFLOADING_EXTRA_CONFIG>;

function parseChunking(v: OffloadingValues, gpuBlockSize: number): number {
  const hasBlockSize = v.block_size !== undefined;
  const hasPerChunk = v.blocks_per_chunk !== undefined;
  if (hasBlockSize && hasPerChunk) {
    throw new KVError(
      CONFIG_INVALID,
      "Specify only one of 'block_size' or 'blocks_per_chunk' in kv_connector_extra_config.",
      {
        field: `${FIELD}.block_size`,
        hint: 'block_size is tokens per offloaded chunk; blocks_per_chunk is GPU blocks per chunk. Keep one of them.',
        details: { expected: 'block_size xor blocks_per_chunk', received: 'both' },
      },
    );
  }
  if (v.blocks_per_chunk !== undefined) {
    const n = v.blocks_per_chunk;
    if (n <= 0) {
      throw new KVError(CONFIG_INVALID, "'blocks_per_chunk' must be greater than 0.", {
        field: `${FIELD}.blocks_per_chunk`,
        hint: 'Use 1 (one GPU block per offloaded chunk) or more.',
        details: { expected: 'an integer > 0', received: String(n) },
      });
    }
    return n;
  }
  if (v.block_size !== undefined) {
    const size = v.block_size;
    if (size % gpuBlockSize !== 0) {
      throw new KVError(
        CONFIG_INVALID,
        `Offloaded block_size (${size}) must be a multiple of the GPU block size (${gpuBlockSize}).`,
        {
          field: `${FIELD}.block_size`,
          hint: `Use a multiple of --block-size ${gpuBlockSize}, e.g. ${gpuBlockSize * Math.max(1, Math.round(size / gpuBlockSize))}, or use blocks_per_chunk.`,
          details: { expected: `a multiple of ${gpuBlockSize}`, received: String(size) },
        },
      );
    }
    return size / gpuBlockSize;
  }
  return 1;
}

/** Parses and validates the extra config; throws KVError with vLLM's messages. */
export function parseOffloadingConfig(
  extra: Record<string, unknown>,
  engineConfig: EngineConfig,
): OffloadingConfig {
  if (extra['cpu_bytes_to_use'] === undefined || extra['cpu_bytes_to_use'] === null) {
    throw new KVError(CONFIG_INVALID, 'cpu_bytes_to_use must be specified in kv_connector_extra_config', {
      field: `${FIELD}.cpu_bytes_to_use`,
      hint: 'Set the CPU tier size in bytes, e.g. --kv-transfer-config \'{"kv_connector":"OffloadingConnector","kv_role":"kv_both","kv_connector_extra_config":{"cpu_bytes_to_use":1073741824}}\'.',
      details: { expected: 'a positive byte count', received: 'nothing' },
    });
  }
  const v = readExtraConfig(OFFLOADING_EXTRA_CONFIG, extra);
  const cpuBytesToUse = v.cpu_bytes_to_use!;
  const specName = extra['spec_name'] ?? 'CPUOffloadingSpec';
  if (typeof specName !== 'string' || !(OFFLOADING_SPECS as readonly string[]).includes(specName)) {
    throw new KVError(CONFIG_INVALID, `Unsupported spec type: ${String(specName)}`, {
      field: `${FIELD}.spec_name`,
      hint: `Use one of ${OFFLOADING_SPECS.join(', ')} (spec_module_path is not supported by kvconnect).`,
      details: { expected: OFFLOADING_SPECS.join(' | '), received: String(specName) },
    });
  }
  const gpuBlockSize = engineConfig.cache.blockSize;
  const blocksPerChunk = parseChunking(v, gpuBlockSize);
  const storeThreshold = v.store_threshold;
  const tiersRaw = v.secondary_tiers;
  const secondaryTiers: SecondaryTierSpec[] = [];
  if (tiersRaw !== undefined && tiersRaw !== null) {
    if (specName !== 'TieringOffloadingSpec') {
      throw configError(
        `${FIELD}.secondary_tiers`,
        'no secondary_tiers with CPUOffloadingSpec',
        tiersRaw,
        'Set "spec_name": "TieringOffloadingSpec" to use secondary tiers.',
      );
    }
    if (!Array.isArray(tiersRaw)) {
      throw configError(
        `${FIELD}.secondary_tiers`,
        'a list of tier objects',
        tiersRaw,
        'Use e.g. [{"type": "fs", "root_dir": "/mnt/kv_cache"}].',
      );
    }
    tiersRaw.forEach((t, i) => {
      secondaryTiers.push(parseTier(t, i));
    });
  }
  if (specName === 'TieringOffloadingSpec') {
    if (secondaryTiers.length === 0) {
      throw configError(
        `${FIELD}.secondary_tiers`,
        'at least one tier',
        tiersRaw,
        'List fs and/or redis tiers, or use CPUOffloadingSpec.',
      );
    }
    if (storeThreshold >= 2) {
      throw configError(
        `${FIELD}.store_threshold`,
        '0 or 1 with TieringOffloadingSpec',
        storeThreshold,
        'store_threshold is supported by CPUOffloadingSpec only.',
      );
    }
    if (engineConfig.parallel.tensorParallelSize > 1) {
      throw configError(
        'parallel.tensor_parallel_size',
        '1 with secondary tiers',
        engineConfig.parallel.tensorParallelSize,
        'Secondary tiers are keyed per engine, not per tensor-parallel rank; use CPUOffloadingSpec with tp > 1.',
      );
    }
  }
  return {
    cpuBytesToUse,
    blocksPerChunk,
    offloadBlockSize: blocksPerChunk * gpuBlockSize,
    evictionPolicy: v.eviction_policy as EvictionPolicyName,
    storeThreshold,
    offloadPromptOnly: v.offload_prompt_only,
    specName: specName as OffloadingSpecName,
    secondaryTiers,
  };
}
