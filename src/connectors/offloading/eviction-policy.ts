/**
 * The eviction policies of an offload tier (`eviction_policy`,
 * docs/connectors/offloading.md#options-kv_connector_extra_config). A policy tracks which
 * keys are resident and picks victims; the tier owns the bytes and says which keys may not be
 * evicted right now (pinned by an in-flight load or store).
 */

import { ArcPolicy } from './arc-policy.ts';
import type { EvictionPolicyName } from './config.ts';
import { LruPolicy } from './lru-policy.ts';

export interface InsertResult {
  /** False when the tier is full and every resident key is pinned. */
  inserted: boolean;
  /** Keys that left the tier to make room (the caller frees their storage). */
  evicted: string[];
}

export interface EvictionPolicy {
  readonly name: EvictionPolicyName;
  readonly capacity: number;
  /** Resident keys. */
  readonly size: number;
  has(key: string): boolean;
  /** A hit on a resident key (lookup or load). */
  touch(key: string): void;
  /** Makes `key` resident, evicting others while full; `canEvict` guards pinned keys. */
  insert(key: string, canEvict: (key: string) => boolean): InsertResult;
  /** Drops a key without remembering it (deleted or corrupt data). */
  remove(key: string): void;
  clear(): void;
  /** Resident keys, least valuable first. */
  residentKeys(): string[];
}

export function createEvictionPolicy(name: EvictionPolicyName, capacity: number): EvictionPolicy {
  return name === 'arc' ? new ArcPolicy(capacity) : new LruPolicy(capacity);
}
