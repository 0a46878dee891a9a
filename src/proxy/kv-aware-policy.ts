/**
 * kv_aware: route to the instance whose prefix cache holds the longest prefix of the prompt,
 * as its own KV events report it (the precise scorer of llm-d / Dynamo's KV router). The
 * prompt is tokenized and hashed as that instance's engine hashes it (its block size and
 * algorithm come with its KV events address); equal prefixes, and instances whose events are
 * unknown, are decided by load (fewest in flight), then in turn.
 *
 * Events arrive only once a prefill has run, so a follow-up that comes while the first
 * request is still queued would see nothing cached. As Dynamo's router does with its
 * "active blocks", the blocks of a prompt just routed count as held by that instance for
 * PENDING_MS (or until its events say more).
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

/** How long a routed prompt's blocks count as held by its instance before events confirm them. */
export const PENDING_MS = 60_000;

export class KvAwarePolicy implements RoutingPolicy {
  readonly name = 'kv_aware' as const;
  readonly needsPrefixHashes = false;
  readonly #deps: KvAwareDeps;
  readonly #turn: Record<BackendRole, number> = { prefill: 0, decode: 0 };

  constructor(deps: KvAwareDeps) {
    this.#deps = deps;
  }

  /** The prompt's block hashes as each candidate's engine computes them (empty when unknown). */
  #hashes(
    candidates: readonly Backend[],
    body: Record<string, unknown>,
  ): { hashes: bigint[]; blockSize: number }[] {
    const { feed, hasher } = this.#deps;
    const byKey = new Map<string, bigint[]>();
    return candidates.map((b) => {
      const source = feed.sourceOf(b);
      if (!source) return { hashes: [], blockSize: 0 };
      const key = `${source.blockSize}:${source.hashAlgo}`;
      let h = byKey.get(key);
      if (!h) {
        h = hasher.hashes(body, source.blockSize, source.hashAlgo as HashAlgo);
        byKey.set(key, h);
      }
      return { hashes: h, blockSize: source.blockSize };
    });
  }

  /** Cached prompt tokens per candidate: reported by its events or pending (0 when its events are unknown). */
  matchedTokens(candidates: readonly Backend[], body: Record<string, unknown>, now = Date.now()): number[] {
    return this.#score(candidates, body, now).matched;
  }

  #score(candidates: readonly Backend[], body: Record<string, unknown>, now: number) {
    const perCandidate = this.#hashes(candidates, body);
    const matched = perCandidate.map(({ hashes, blockSize }, i) =>
      blockSize === 0 ? 0 : this.#deps.feed.index.prefixLength(candidates[i]!.url, hashes, now) * blockSize,
    );
    return { perCandidate, matched };
  }

  select(role: BackendRole, candidates: readonly Backend[], ctx: RouteContext): Backend {
    const now = Date.now();
    const { perCandidate, matched } = this.#score(candidates, ctx.body ?? {}, now);
    const best = Math.max(...matched);
    const tied = candidates.filter((_, i) => matched[i] === best);
    const minLoad = Math.min(...tied.map((b) => b.inFlight));
    const leastLoaded = tied.filter((b) => b.inFlight === minLoad);
    const chosen = leastLoaded[this.#turn[role]++ % leastLoaded.length]!;
    this.#deps.feed.index.markPending(
      chosen.url,
      perCandidate[candidates.indexOf(chosen)]!.hashes,
      now + PENDING_MS,
    );
    this.#deps.metrics.kvAwareRoutes.inc({ matched: best > 0 ? 'true' : 'false' });
    this.#deps.metrics.kvAwareMatchedTokens.inc(best);
    return chosen;
  }
}
