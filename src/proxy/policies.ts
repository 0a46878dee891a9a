/**
 * Routing policies: which healthy backend of a role gets the next request.
 * - round_robin: in turn.
 * - least_loaded: fewest requests in flight (ties in list order).
 * - prefix_aware: the backend that last served the longest matching chain of prompt-prefix
 *   hashes (its prefix cache likely holds those blocks); otherwise least_loaded, with
 *   ties taken in turn so that new prefixes spread over idle backends. Every
 *   routed request records its hashes → backend in a bounded LRU map.
 * - kv_aware: the backend whose KV events show the longest cached prefix (./kv-aware-policy.ts).
 */
import { LruMap } from '../util/lru-map.ts';
import type { Backend } from './backend.ts';
import { type KvAwareDeps, KvAwarePolicy } from './kv-aware-policy.ts';
import type { BackendRole, PolicyName } from './types.ts';

export interface RouteContext {
  /** Chained prompt-prefix hashes (only computed for prefix_aware). */
  prefixHashes: readonly string[];
  /** The client's request body (kv_aware tokenizes its prompt). */
  body?: Record<string, unknown>;
}

export interface RoutingPolicy {
  readonly name: PolicyName;
  readonly needsPrefixHashes: boolean;
  /** `candidates` is non-empty and holds healthy backends of one role. */
  select(role: BackendRole, candidates: readonly Backend[], ctx: RouteContext): Backend;
}

class RoundRobin implements RoutingPolicy {
  readonly name = 'round_robin' as const;
  readonly needsPrefixHashes = false;
  readonly #cursor: Record<BackendRole, number> = { prefill: 0, decode: 0 };

  select(role: BackendRole, candidates: readonly Backend[]): Backend {
    const i = this.#cursor[role] % candidates.length;
    this.#cursor[role] = (this.#cursor[role] + 1) % 1_000_000_007;
    return candidates[i]!;
  }
}

/** Fewest in flight; ties go to the candidate at or after `tieStart` (so idle backends take turns). */
export function leastLoaded(candidates: readonly Backend[], tieStart = 0): Backend {
  let best = candidates[tieStart % candidates.length]!;
  for (let k = 1; k < candidates.length; k++) {
    const b = candidates[(tieStart + k) % candidates.length]!;
    if (b.inFlight < best.inFlight) best = b;
  }
  return best;
}

class LeastLoaded implements RoutingPolicy {
  readonly name = 'least_loaded' as const;
  readonly needsPrefixHashes = false;

  select(_role: BackendRole, candidates: readonly Backend[]): Backend {
    return leastLoaded(candidates);
  }
}

class PrefixAware implements RoutingPolicy {
  readonly name = 'prefix_aware' as const;
  readonly needsPrefixHashes = true;
  readonly #owners: Record<BackendRole, LruMap<string, string>>;
  readonly #misses: Record<BackendRole, number> = { prefill: 0, decode: 0 };

  constructor(capacity: number) {
    this.#owners = { prefill: new LruMap(capacity), decode: new LruMap(capacity) };
  }

  select(role: BackendRole, candidates: readonly Backend[], ctx: RouteContext): Backend {
    const owners = this.#owners[role];
    let chosen: Backend | undefined;
    for (let i = ctx.prefixHashes.length - 1; i >= 0 && chosen === undefined; i--) {
      const owner = owners.get(ctx.prefixHashes[i]!);
      if (owner !== undefined) chosen = candidates.find((b) => b.url === owner);
    }
    if (chosen === undefined) {
      chosen = leastLoaded(candidates, this.#misses[role]);
      this.#misses[role] += 1;
    }
    for (const h of ctx.prefixHashes) owners.set(h, chosen.url);
    return chosen;
  }
}

export function createPolicy(
  name: PolicyName,
  prefixCacheEntries: number,
  kvAware: KvAwareDeps | null = null,
): RoutingPolicy {
  switch (name) {
    case 'kv_aware':
      if (!kvAware) throw new Error('kv_aware needs the KV events feed and a tokenizer');
      return new KvAwarePolicy(kvAware);
    case 'round_robin':
      return new RoundRobin();
    case 'least_loaded':
      return new LeastLoaded();
    case 'prefix_aware':
      return new PrefixAware(prefixCacheEntries);
  }
}
