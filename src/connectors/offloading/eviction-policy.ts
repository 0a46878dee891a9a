/**
 * The eviction policies of an offload tier (`eviction_policy`,
 * docs/connectors/offloading.md#options-kv_connector_extra_config). A policy tracks which
 * keys are resident and picks victims; the tier owns the bytes and says which keys may not be
 * evicted right now (pinned by an in-flight load or store).
 */

import { ArcPolicy } from './arc-policy.ts';
import { LruPolicy } from './lru-policy.ts';
import { checkPluginShape, type PluginClass } from './plugin-module.ts';

export interface InsertResult {
  /** False when the tier is full and every resident key is pinned. */
  inserted: boolean;
  /** Keys that left the tier to make room (the caller frees their storage). */
  evicted: string[];
}

export interface EvictionPolicy {
  /** 'lru', 'arc', or an out-of-tree policy's class name. */
  readonly name: string;
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

/** What an out-of-tree policy class (`cache_policy_module_path`) implements; `new Cls(capacity)`. */
export const EVICTION_POLICY_METHODS = ['has', 'touch', 'insert', 'remove', 'clear', 'residentKeys'] as const;

/**
 * The built-in policy `name`, or an instance of `policyClass` (an out-of-tree policy,
 * constructed with the capacity in slots; `name` and `capacity` default to the class name
 * and that capacity when the instance does not set them).
 */
export function createEvictionPolicy(
  name: string,
  capacity: number,
  policyClass: PluginClass | null = null,
): EvictionPolicy {
  if (policyClass === null) return name === 'arc' ? new ArcPolicy(capacity) : new LruPolicy(capacity);
  const policy = new (policyClass as unknown as new (capacity: number) => EvictionPolicy)(capacity);
  checkPluginShape(
    policy,
    EVICTION_POLICY_METHODS,
    `Eviction policy ${name}`,
    'kv_connector_extra_config.eviction_policy',
  );
  return policy;
}
