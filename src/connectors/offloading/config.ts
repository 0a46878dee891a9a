/**
 * OffloadingConnector's `kv_connector_extra_config` (spec §5.8): vLLM's keys, defaults and
 * error strings, plus the secondary tiers of TieringOffloadingSpec.
 */
import { CONFIG_INVALID, configError } from '../../config/config-error.ts';
import type { EngineConfig } from '../../config/types.ts';
import { KVError } from '../../errors/kv-error.ts';

export const OFFLOADING_SPECS = ['CPUOffloadingSpec', 'TieringOffloadingSpec'] as const;
export type OffloadingSpecName = (typeof OFFLOADING_SPECS)[number];
export const EVICTION_POLICIES = ['lru', 'arc'] as const;
export type EvictionPolicyName = (typeof EVICTION_POLICIES)[number];
export const STORE_THRESHOLD_TRACKER_SIZE = 64_000;
export const DEFAULT_TIER_TIMEOUT_MS = 200;

export interface FsTierSpec {
  type: 'fs';
  path: string;
  /** null = unbounded. */
  capacityBytes: number | null;
  timeoutMs: number;
}

export interface RedisTierSpec {
  type: 'redis';
  /** Single server URL (redis://host:port); null when clusterNodes is set. */
  url: string | null;
  /** Root nodes of a Redis Cluster; empty for a single server. */
  clusterNodes: string[];
  timeoutMs: number;
  keyPrefix: string;
}

export type SecondaryTierSpec = FsTierSpec | RedisTierSpec;

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

const FIELD = 'kv_transfer_config.kv_connector_extra_config';

function toNumber(value: unknown): number | null {
  if (typeof value === 'number' && Number.isFinite(value)) return value;
  if (typeof value === 'string' && value.trim() !== '' && Number.isFinite(Number(value)))
    return Number(value);
  return null;
}

function intField(
  extra: Record<string, unknown>,
  key: string,
  min: number,
  hint: string,
): number | undefined {
  const raw = extra[key];
  if (raw === undefined || raw === null) return undefined;
  const n = toNumber(raw);
  if (n === null || !Number.isInteger(n) || n < min) {
    throw configError(`${FIELD}.${key}`, `an integer >= ${min}`, raw, hint);
  }
  return n;
}

function boolField(extra: Record<string, unknown>, key: string, fallback: boolean): boolean {
  const raw = extra[key];
  if (raw === undefined || raw === null) return fallback;
  if (typeof raw === 'boolean') return raw;
  if (raw === 'true' || raw === 'false') return raw === 'true';
  throw configError(`${FIELD}.${key}`, 'true or false', raw, `Set ${key} to true or false.`);
}

function parseChunking(extra: Record<string, unknown>, gpuBlockSize: number): number {
  const hasBlockSize = extra['block_size'] !== undefined && extra['block_size'] !== null;
  const hasPerChunk = extra['blocks_per_chunk'] !== undefined && extra['blocks_per_chunk'] !== null;
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
  if (hasPerChunk) {
    const raw = extra['blocks_per_chunk'];
    const n = toNumber(raw);
    if (n === null || !Number.isInteger(n)) {
      throw configError(
        `${FIELD}.blocks_per_chunk`,
        'a positive integer',
        raw,
        'Use e.g. "blocks_per_chunk": 4.',
      );
    }
    if (n <= 0) {
      throw new KVError(CONFIG_INVALID, "'blocks_per_chunk' must be greater than 0.", {
        field: `${FIELD}.blocks_per_chunk`,
        hint: 'Use 1 (one GPU block per offloaded chunk) or more.',
        details: { expected: 'an integer > 0', received: String(raw) },
      });
    }
    return n;
  }
  if (hasBlockSize) {
    const size = intField(extra, 'block_size', 1, 'block_size is a token count, e.g. 64.') ?? gpuBlockSize;
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

function parseTimeout(tier: Record<string, unknown>, where: string): number {
  const raw = tier['timeout_ms'];
  if (raw === undefined || raw === null) return DEFAULT_TIER_TIMEOUT_MS;
  const n = toNumber(raw);
  if (n === null || n <= 0) {
    throw configError(`${where}.timeout_ms`, 'a positive number of milliseconds', raw, 'Use e.g. 200.');
  }
  return n;
}

function parseTier(raw: unknown, index: number): SecondaryTierSpec {
  const where = `${FIELD}.secondary_tiers[${index}]`;
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw configError(
      where,
      "an object like {type: 'fs', path: '/var/kv'}",
      raw,
      'Each tier is an object with a type.',
    );
  }
  const tier = raw as Record<string, unknown>;
  if (tier['type'] === 'fs') {
    const path = tier['path'];
    if (typeof path !== 'string' || path === '') {
      throw configError(
        `${where}.path`,
        'a directory path',
        path,
        'Give the fs tier a directory, e.g. "/var/cache/kv".',
      );
    }
    const capacity = tier['capacity_bytes'];
    let capacityBytes: number | null = null;
    if (capacity !== undefined && capacity !== null) {
      const n = toNumber(capacity);
      if (n === null || n <= 0) {
        throw configError(
          `${where}.capacity_bytes`,
          'a positive byte count',
          capacity,
          'Omit it for no bound.',
        );
      }
      capacityBytes = n;
    }
    return { type: 'fs', path, capacityBytes, timeoutMs: parseTimeout(tier, where) };
  }
  if (tier['type'] === 'redis') {
    const url = tier['url'];
    const nodes = tier['cluster_nodes'];
    const clusterNodes: string[] = [];
    if (nodes !== undefined && nodes !== null) {
      if (!Array.isArray(nodes) || nodes.length === 0 || !nodes.every((n) => typeof n === 'string')) {
        throw configError(
          `${where}.cluster_nodes`,
          'a non-empty list of redis:// URLs',
          nodes,
          'List one or more cluster nodes.',
        );
      }
      clusterNodes.push(...(nodes as string[]));
    }
    if (clusterNodes.length === 0 && (typeof url !== 'string' || !/^rediss?:\/\//.test(url))) {
      throw configError(
        `${where}.url`,
        'a redis:// URL',
        url,
        'Use e.g. "url": "redis://127.0.0.1:6379", or "cluster_nodes": [...].',
      );
    }
    const prefix = tier['key_prefix'] ?? 'kvconnect';
    if (typeof prefix !== 'string')
      throw configError(`${where}.key_prefix`, 'a string', prefix, 'Omit it or use a short name.');
    return {
      type: 'redis',
      url: clusterNodes.length > 0 ? null : (url as string),
      clusterNodes,
      timeoutMs: parseTimeout(tier, where),
      keyPrefix: prefix,
    };
  }
  throw configError(
    `${where}.type`,
    "'fs' or 'redis'",
    tier['type'],
    'kvconnect ships the fs and redis tiers.',
  );
}

/** Parses and validates the extra config; throws KVError with vLLM's messages. */
export function parseOffloadingConfig(
  extra: Record<string, unknown>,
  engineConfig: EngineConfig,
): OffloadingConfig {
  const rawCpu = extra['cpu_bytes_to_use'];
  if (rawCpu === undefined || rawCpu === null) {
    throw new KVError(CONFIG_INVALID, 'cpu_bytes_to_use must be specified in kv_connector_extra_config', {
      field: `${FIELD}.cpu_bytes_to_use`,
      hint: 'Set the CPU tier size in bytes, e.g. --kv-transfer-config \'{"kv_connector":"OffloadingConnector","kv_role":"kv_both","kv_connector_extra_config":{"cpu_bytes_to_use":1073741824}}\'.',
      details: { expected: 'a positive byte count', received: 'nothing' },
    });
  }
  const cpuBytesToUse = toNumber(rawCpu);
  if (cpuBytesToUse === null || cpuBytesToUse <= 0) {
    throw configError(
      `${FIELD}.cpu_bytes_to_use`,
      'a positive byte count',
      rawCpu,
      'Use a number such as 1073741824 (1 GiB), or in --kv-transfer-config JSON an unquoted human-readable size such as 8G (binary) or 8g (decimal).',
    );
  }
  const specName = extra['spec_name'] ?? 'CPUOffloadingSpec';
  if (typeof specName !== 'string' || !(OFFLOADING_SPECS as readonly string[]).includes(specName)) {
    throw new KVError(CONFIG_INVALID, `Unsupported spec type: ${String(specName)}`, {
      field: `${FIELD}.spec_name`,
      hint: `Use one of ${OFFLOADING_SPECS.join(', ')} (spec_module_path is not supported by kvconnect).`,
      details: { expected: OFFLOADING_SPECS.join(' | '), received: String(specName) },
    });
  }
  const gpuBlockSize = engineConfig.cache.blockSize;
  const blocksPerChunk = parseChunking(extra, gpuBlockSize);
  const policy = extra['eviction_policy'] ?? 'lru';
  if (typeof policy !== 'string' || !(EVICTION_POLICIES as readonly string[]).includes(policy)) {
    throw configError(
      `${FIELD}.eviction_policy`,
      "'lru' or 'arc'",
      policy,
      'kvconnect implements lru (default) and arc.',
    );
  }
  const storeThreshold = intField(extra, 'store_threshold', 0, 'Use 0 (store everything) or N >= 2.') ?? 0;
  const tiersRaw = extra['secondary_tiers'];
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
        'Use e.g. [{"type": "fs", "path": "/var/kv"}].',
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
    evictionPolicy: policy as EvictionPolicyName,
    storeThreshold,
    offloadPromptOnly: boolField(extra, 'offload_prompt_only', true),
    specName: specName as OffloadingSpecName,
    secondaryTiers,
  };
}
