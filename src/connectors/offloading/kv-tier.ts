/**
 * One small interface for every place offloaded KV chunks can live (CPU memory, a
 * directory, Redis). Batched, and it never rejects: a tier that is down, slow or holds
 * corrupt bytes answers "miss" (null / false / not stored) within its timeout and counts
 * it in its stats, so the engine recomputes instead of failing.
 */

import type { P2PSource } from '../../wire/index.ts';

/** What a load knows beyond its keys: the p2p tier pulls per request, from the request's peer. */
export interface TierLoadContext {
  /** The request's remote_prefiller / remote_kv_source. */
  p2p?: P2PSource;
  /** Expected bytes of each key's value. */
  lengths?: readonly number[];
}

export interface TierEntry {
  key: string;
  value: Uint8Array;
}

export interface TierStats {
  puts: number;
  putBytes: number;
  gets: number;
  hits: number;
  getBytes: number;
  /** Values that failed their checksum or length check. */
  corrupt: number;
  /** Operations that failed or timed out (the tier answered "miss"). */
  errors: number;
  evictions: number;
}

export function emptyTierStats(): TierStats {
  return { puts: 0, putBytes: 0, gets: 0, hits: 0, getBytes: 0, corrupt: 0, errors: 0, evictions: 0 };
}

export interface KVTier {
  /** 'cpu', 'fs', 'redis', 'obj', 'p2p', or an out-of-tree tier's class name. */
  readonly kind: string;
  readonly medium: 'CPU' | 'STORAGE';
  /** Upper bound of one operation in ms (0 = in memory). */
  readonly timeoutMs: number;
  /** Stores each value; returns the keys actually stored. */
  putMany(entries: readonly TierEntry[]): Promise<string[]>;
  /** One result per key: the value, or null (missing, corrupt, or the tier is unavailable). */
  getMany(keys: readonly string[], ctx?: TierLoadContext): Promise<(Uint8Array | null)[]>;
  hasMany(keys: readonly string[]): Promise<boolean[]>;
  deleteMany(keys: readonly string[]): Promise<void>;
  /** Startup check (a tier that can be misconfigured): throws a KVError naming the field to fix. */
  probe?(): Promise<void>;
  /** Counters since the tier was created. */
  stats(): TierStats;
  /** Keys evicted by the tier itself since the last call (for BlockRemoved events). */
  takeEvicted(): string[];
  close(): Promise<void>;
}
