/**
 * The secondary tiers of TieringOffloadingSpec (`kv_connector_extra_config.secondary_tiers`):
 * kvconnect ships an fs tier and a Redis (single or Cluster) tier.
 */
import { configError } from '../../config/config-error.ts';
import { parseExtraNumber } from '../../config/extra-config.ts';

export const DEFAULT_TIER_TIMEOUT_MS = 200;

const FIELD = 'kv_connector_extra_config';

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

function parseTimeout(tier: Record<string, unknown>, where: string): number {
  const raw = tier['timeout_ms'];
  if (raw === undefined || raw === null) return DEFAULT_TIER_TIMEOUT_MS;
  const n = parseExtraNumber(raw);
  if (n === null || n <= 0) {
    throw configError(`${where}.timeout_ms`, 'a positive number of milliseconds', raw, 'Use e.g. 200.');
  }
  return n;
}

export function parseTier(raw: unknown, index: number): SecondaryTierSpec {
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
