/**
 * kv_aware: route to the instance whose prefix cache holds the longest prefix of the prompt,
 * as its own KV events report it (the precise scorer of llm-d / Dynamo's KV router). The
 * prompt is tokenized and hashed as that instance's engine hashes it (its block size and
 * algorithm come with its KV events address); equal prefixes, and instances whose events are
 * unknown, are decided by load (fewest in flight), then in turn.
 */
import type { HashAlgo } from '../config/types.ts';
import type { Backend } from './backend.ts';
import type { KvEventsFeed } from './kv-events-feed.ts';
import type { RouteContext, RoutingPolicy } from './policies.ts';
import type { PromptBlockHasher } from './prompt-blocks.ts';
import type { ProxyMetrics } from './proxy-metrics.ts';
import type { BackendRole } from './types.ts';

export interface KvAwareDeps {
  feed: KvEventsFeed;
  hasher: PromptBlockHasher;
  metrics: ProxyMetrics;
}

export class KvAwarePolicy implements RoutingPolicy {
  readonly name = 'kv_aware' as const;
  readonly needsPrefixHashes = false;
  readonly #deps: KvAwareDeps;
  readonly #turn: Record<BackendRole, number> = { prefill: 0, decode: 0 };

  constructor(deps: KvAwareDeps) {
    this.#deps = deps;
  }

  /** Cached prompt tokens per candidate (0 when its events are unknown). */
  matchedTokens(candidates: readonly Backend[], body: Record<string, unknown>): number[] {
    const { feed, hasher } = this.#deps;
    const hashes = new Map<string, bigint[]>();
    return candidates.map((b) => {
      const source = feed.sourceOf(b);
      if (!source) return 0;
      const key = `${source.blockSize}:${source.hashAlgo}`;
      let h = hashes.get(key);
      if (!h) {
        h = hasher.hashes(body, source.blockSize, source.hashAlgo as HashAlgo);
        hashes.set(key, h);
      }
      return feed.index.prefixLength(b.url, h) * source.blockSize;
    });
  }

  select(role: BackendRole, candidates: readonly Backend[], ctx: RouteContext): Backend {
    const matched = this.matchedTokens(candidates, ctx.body ?? {});
    const best = Math.max(...matched);
    const tied = candidates.filter((_, i) => matched[i] === best);
    const minLoad = Math.min(...tied.map((b) => b.inFlight));
    const leastLoaded = tied.filter((b) => b.inFlight === minLoad);
    const chosen = leastLoaded[this.#turn[role]++ % leastLoaded.length]!;
    this.#deps.metrics.kvAwareRoutes.inc({ matched: best > 0 ? 'true' : 'false' });
    this.#deps.metrics.kvAwareMatchedTokens.inc(best);
    return chosen;
  }
}
