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
import { EVICTION_POLICY_METHODS } from './eviction-policy.ts';
import { checkPluginShape, loadPluginClass, type PluginClass } from './plugin-module.ts';
import { SPEC_METHODS } from './spec-module.ts';
import { parseTier, type SecondaryTierSpec } from './tier-config.ts';

export const OFFLOADING_SPECS = ['CPUOffloadingSpec', 'TieringOffloadingSpec'] as const;
export type OffloadingSpecName = (typeof OFFLOADING_SPECS)[number];
export const EVICTION_POLICIES = ['lru', 'arc'] as const;
export type EvictionPolicyName = (typeof EVICTION_POLICIES)[number];
export const STORE_THRESHOLD_TRACKER_SIZE = 64_000;

export interface OffloadingConfig {
  cpuBytesToUse: number;
  /** The class of an out-of-tree spec (`spec_name` + `spec_module_path`), else null. */
  specClass: PluginClass | null;
  /** The class of an out-of-tree eviction policy (`cache_policy_module_path`), else null. */
  evictionPolicyClass: PluginClass | null;
  /** Entries of the store_threshold tracker (`max_tracker_size`). */
  maxTrackerSize: number;
  /** `self_describing_kv_events`: full BlockStored payloads instead of vLLM's placeholders. */
  selfDescribingKvEvents: boolean;
  /** GPU blocks per offloaded chunk. */
  blocksPerChunk: number;
  /** Tokens per offloaded chunk (blocksPerChunk × GPU block size). */
  offloadBlockSize: number;
  /** 'lru', 'arc', or an out-of-tree policy's class name. */
  evictionPolicy: string;
  storeThreshold: number;
  offloadPromptOnly: boolean;
  /** A built-in spec, or an out-of-tree spec's class name. */
  specName: string;
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
    eviction_policy: { type: 'string', default: 'lru', nonEmpty: true },
    cache_policy_module_path: { type: 'string', nonEmpty: true },
    store_threshold: { type: 'integer', default: 0, min: 0, hint: 'Use 0 (store everything) or N >= 2.' },
    max_tracker_size: {
      type: 'integer',
      default: STORE_THRESHOLD_TRACKER_SIZE,
      min: 1,
      hint: 'The number of keys the store_threshold tracker remembers, e.g. 64000 (the default).',
    },
    offload_prompt_only: { type: 'boolean', default: true },
    secondary_tiers: { type: 'custom' },
    self_describing_kv_events: { type: 'boolean', default: false },
    spec_module_path: { type: 'string', nonEmpty: true },
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

/**
 * `spec_name`: a built-in spec, else (as vLLM does) the class `spec_name` of
 * `spec_module_path` (spec-module.ts).
 */
function parseSpec(
  raw: unknown,
  modulePath: string | undefined,
): { specName: string; specClass: PluginClass | null } {
  if (typeof raw === 'string' && (OFFLOADING_SPECS as readonly string[]).includes(raw)) {
    return { specName: raw, specClass: null };
  }
  if (typeof raw !== 'string' || raw === '' || modulePath === undefined) {
    throw new KVError(CONFIG_INVALID, `Unsupported spec type: ${String(raw)}`, {
      field: `${FIELD}.spec_name`,
      hint: `Use one of ${OFFLOADING_SPECS.join(', ')}, or the class name of an out-of-tree spec with "spec_module_path": "./my-spec.js".`,
      details: {
        expected: `${OFFLOADING_SPECS.join(' | ')} | a class with spec_module_path`,
        received: String(raw),
      },
    });
  }
  const specClass = loadPluginClass(modulePath, raw, `${FIELD}.spec_module_path`, `${FIELD}.spec_name`);
  if (!SPEC_METHODS.some((m) => typeof (specClass.prototype as Record<string, unknown>)[m] === 'function')) {
    checkPluginShape(
      specClass.prototype,
      SPEC_METHODS,
      `Spec class ${raw} (${modulePath})`,
      `${FIELD}.spec_name`,
    );
  }
  return { specName: raw, specClass };
}

/**
 * `eviction_policy`: a built-in policy, else (as vLLM does) the class of that name in
 * `cache_policy_module_path`.
 */
function parseEvictionPolicy(
  name: string,
  modulePath: string | undefined,
): { evictionPolicy: string; evictionPolicyClass: PluginClass | null } {
  if ((EVICTION_POLICIES as readonly string[]).includes(name))
    return { evictionPolicy: name, evictionPolicyClass: null };
  if (modulePath === undefined) {
    throw configError(
      `${FIELD}.eviction_policy`,
      `${EVICTION_POLICIES.map((p) => `'${p}'`).join(' or ')}, or a class name with cache_policy_module_path`,
      name,
      'kvconnect implements lru (default) and arc; an out-of-tree policy needs "cache_policy_module_path": "./my-policy.js".',
    );
  }
  const cls = loadPluginClass(
    modulePath,
    name,
    `${FIELD}.cache_policy_module_path`,
    `${FIELD}.eviction_policy`,
  );
  checkPluginShape(
    cls.prototype,
    EVICTION_POLICY_METHODS,
    `Eviction policy class ${name} (${modulePath})`,
    `${FIELD}.eviction_policy`,
  );
  return { evictionPolicy: name, evictionPolicyClass: cls };
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
  const { specName, specClass } = parseSpec(extra['spec_name'] ?? 'CPUOffloadingSpec', v.spec_module_path);
  const { evictionPolicy, evictionPolicyClass } = parseEvictionPolicy(
    v.eviction_policy,
    v.cache_policy_module_path,
  );
  const gpuBlockSize = engineConfig.cache.blockSize;
  const blocksPerChunk = parseChunking(v, gpuBlockSize);
  const storeThreshold = v.store_threshold;
  const tiersRaw = v.secondary_tiers;
  const secondaryTiers: SecondaryTierSpec[] = [];
  if (tiersRaw !== undefined && tiersRaw !== null) {
    if (specName === 'CPUOffloadingSpec') {
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
  if (specName === 'TieringOffloadingSpec' || specClass !== null) {
    if (secondaryTiers.length === 0 && specClass === null) {
      throw configError(
        `${FIELD}.secondary_tiers`,
        'at least one tier',
        tiersRaw,
        'List fs, redis, obj and/or p2p tiers, or use CPUOffloadingSpec.',
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
    evictionPolicy,
    evictionPolicyClass,
    storeThreshold,
    maxTrackerSize: v.max_tracker_size,
    selfDescribingKvEvents: v.self_describing_kv_events,
    offloadPromptOnly: v.offload_prompt_only,
    specName,
    specClass,
    secondaryTiers,
  };
}
