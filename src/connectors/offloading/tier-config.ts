/**
 * The secondary tiers of TieringOffloadingSpec (`kv_connector_extra_config.secondary_tiers`,
 * docs/connectors/offloading.md#secondary-tiers): vLLM's `fs` tier with vLLM's keys,
 * kvconnect's Redis (single or Cluster) tier, vLLM's `obj` (S3) tier (obj-tier-config.ts),
 * and out-of-tree tiers by `type` + `module_path`. Every tier takes vLLM's
 * `enable_kv_events` and `locality`.
 */
import { configError } from '../../config/config-error.ts';
import { parseExtraBoolean, parseExtraNumber } from '../../config/extra-config.ts';
import { MODULE_TIER_METHODS } from './module-tier.ts';
import { type ObjTierSpec, parseObjTier } from './obj-tier-config.ts';
import { type P2PTierSpec, parseP2PTier } from './p2p-tier-config.ts';
import { checkPluginShape, loadPluginClass, type PluginClass } from './plugin-module.ts';
import { parseCount, parseTimeoutMs } from './tier-fields.ts';

export const DEFAULT_TIER_TIMEOUT_MS = 200;
/** vLLM's defaults for the fs tier's `n_read_threads` / `n_write_threads`. */
export const DEFAULT_FS_READ_THREADS = 16;
export const DEFAULT_FS_WRITE_THREADS = 16;

const FIELD = 'kv_connector_extra_config';

export const TIER_LOCALITIES = ['LOCAL', 'REMOTE'] as const;
export type TierLocality = (typeof TIER_LOCALITIES)[number];

/** vLLM's per-tier KV event settings. */
export interface TierEventSettings {
  /** Publish BlockStored (medium STORAGE) for chunks this tier stored. */
  enableKvEvents: boolean;
  /** Sent in the tier's KV events only when configured. */
  locality: TierLocality | null;
}

export interface FsTierSpec extends TierEventSettings {
  type: 'fs';
  rootDir: string;
  nReadThreads: number;
  nWriteThreads: number;
  /** null = unbounded. */
  capacityBytes: number | null;
  timeoutMs: number;
}

export interface RedisTierSpec extends TierEventSettings {
  type: 'redis';
  /** Single server URL (redis://host:port); null when clusterNodes is set. */
  url: string | null;
  /** Root nodes of a Redis Cluster; empty for a single server. */
  clusterNodes: string[];
  timeoutMs: number;
  keyPrefix: string;
}

/** An out-of-tree tier: the class `className` exported by `modulePath`. */
export interface ModuleTierSpec extends TierEventSettings {
  type: 'module';
  className: string;
  modulePath: string;
  tierClass: PluginClass;
  /** The tier's whole entry, passed to its constructor. */
  options: Record<string, unknown>;
  timeoutMs: number;
}

export type SecondaryTierSpec =
  | FsTierSpec
  | RedisTierSpec
  | ModuleTierSpec
  | (ObjTierSpec & TierEventSettings)
  | (P2PTierSpec & TierEventSettings);

const BUILT_IN_TIERS = ['fs', 'redis', 'obj', 'p2p'] as const;

const COMMON_KEYS = ['type', 'enable_kv_events', 'locality', 'timeout_ms'];
const FS_KEYS = [...COMMON_KEYS, 'root_dir', 'n_read_threads', 'n_write_threads', 'capacity_bytes'];

/** `enable_kv_events` and `locality`, as vLLM reads them for its fs and obj tiers. */
export function parseTierEventSettings(tier: Record<string, unknown>, where: string): TierEventSettings {
  const rawEvents = tier['enable_kv_events'];
  let enableKvEvents = false;
  if (rawEvents !== undefined && rawEvents !== null) {
    const b = parseExtraBoolean(rawEvents);
    if (b === null)
      throw configError(`${where}.enable_kv_events`, 'true or false', rawEvents, 'Omit it for false.');
    enableKvEvents = b;
  }
  const rawLocality = tier['locality'];
  let locality: TierLocality | null = null;
  if (rawLocality !== undefined && rawLocality !== null) {
    if (!(TIER_LOCALITIES as readonly unknown[]).includes(rawLocality)) {
      throw configError(
        `${where}.locality`,
        "'LOCAL' or 'REMOTE'",
        rawLocality,
        'Use "LOCAL" for storage local to this engine, "REMOTE" otherwise, or omit it (unspecified).',
      );
    }
    locality = rawLocality as TierLocality;
  }
  return { enableKvEvents, locality };
}

function refuseUnknownKeys(tier: Record<string, unknown>, allowed: readonly string[], where: string): void {
  for (const key of Object.keys(tier)) {
    if (allowed.includes(key)) continue;
    if (key === 'path') {
      throw configError(
        `${where}.path`,
        "root_dir (vLLM's key for the fs tier's directory)",
        tier[key],
        `Rename "path" to "root_dir", e.g. {"type": "fs", "root_dir": ${JSON.stringify(tier[key])}}.`,
      );
    }
    throw configError(
      `${where}.${key}`,
      `one of the fs tier's keys (${allowed.join(', ')})`,
      tier[key],
      'Remove it.',
    );
  }
}

function parseFsTier(tier: Record<string, unknown>, where: string): FsTierSpec {
  refuseUnknownKeys(tier, FS_KEYS, where);
  const rootDir = tier['root_dir'];
  if (typeof rootDir !== 'string' || rootDir === '') {
    throw configError(
      `${where}.root_dir`,
      'a directory path',
      rootDir,
      'Give the fs tier a directory, e.g. "root_dir": "/mnt/kv_cache" (created if missing).',
    );
  }
  const capacity = tier['capacity_bytes'];
  let capacityBytes: number | null = null;
  if (capacity !== undefined && capacity !== null) {
    const n = parseExtraNumber(capacity);
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
  return {
    type: 'fs',
    rootDir,
    nReadThreads: parseCount(tier, 'n_read_threads', where, DEFAULT_FS_READ_THREADS),
    nWriteThreads: parseCount(tier, 'n_write_threads', where, DEFAULT_FS_WRITE_THREADS),
    capacityBytes,
    timeoutMs: parseTimeoutMs(tier, where, DEFAULT_TIER_TIMEOUT_MS),
    ...parseTierEventSettings(tier, where),
  };
}

function parseRedisTier(tier: Record<string, unknown>, where: string): RedisTierSpec {
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
    timeoutMs: parseTimeoutMs(tier, where, DEFAULT_TIER_TIMEOUT_MS),
    keyPrefix: prefix,
    ...parseTierEventSettings(tier, where),
  };
}

/** `type` names a class exported by `module_path` (vLLM: a class in a Python module). */
function parseModuleTier(tier: Record<string, unknown>, where: string): ModuleTierSpec {
  const type = tier['type'];
  const modulePath = tier['module_path'];
  if (typeof type !== 'string' || type === '' || typeof modulePath !== 'string' || modulePath === '') {
    throw configError(
      `${where}.type`,
      `one of ${BUILT_IN_TIERS.map((t) => `'${t}'`).join(', ')}, or a class name with module_path`,
      type,
      'kvconnect ships the fs, redis, obj and p2p tiers; an out-of-tree tier needs "module_path": "./my-tier.js".',
    );
  }
  const tierClass = loadPluginClass(modulePath, type, `${where}.module_path`, `${where}.type`);
  checkPluginShape(
    tierClass.prototype,
    MODULE_TIER_METHODS,
    `Tier class ${type} (${modulePath})`,
    `${where}.type`,
  );
  return {
    type: 'module',
    className: type,
    modulePath,
    tierClass,
    options: { ...tier },
    timeoutMs: parseTimeoutMs(tier, where, DEFAULT_TIER_TIMEOUT_MS),
    ...parseTierEventSettings(tier, where),
  };
}

export function parseTier(raw: unknown, index: number): SecondaryTierSpec {
  const where = `${FIELD}.secondary_tiers[${index}]`;
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw configError(
      where,
      "an object like {type: 'fs', root_dir: '/mnt/kv_cache'}",
      raw,
      'Each tier is an object with a type.',
    );
  }
  const tier = raw as Record<string, unknown>;
  if (tier['type'] === 'fs') return parseFsTier(tier, where);
  if (tier['type'] === 'redis') return parseRedisTier(tier, where);
  if (tier['type'] === 'obj') return { ...parseObjTier(tier, where), ...parseTierEventSettings(tier, where) };
  if (tier['type'] === 'p2p') return { ...parseP2PTier(tier, where), ...parseTierEventSettings(tier, where) };
  return parseModuleTier(tier, where);
}
