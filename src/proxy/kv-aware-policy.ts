/**
 * kv_aware: route to the instance where the request's first token comes soonest, weighing
 * the prefix it has cached (its own KV events, the precise scorer of llm-d / Dynamo's KV
 * router) against the work already routed there (./kv-cost.ts). The prompt is tokenized and
 * hashed as that instance's engine hashes it (its block size and algorithm come with its KV
 * events address); instances whose events are unknown count as holding nothing. A request
 * whose `model` is not the instance's served model names a LoRA adapter there: its blocks
 * carry the adapter's name as an extra key, so prefixes never match across adapters.
 *
 * Events arrive only once a prefill has been scheduled, so a follow-up that comes while the
 * first request is still queued would see nothing cached. As Dynamo's router does with its
 * "active blocks", the blocks of a prompt just routed count as held by that instance for
 * PENDING_MS (or until its events say more), and its uncached tokens count as queued there
 * until the BlockStored of its last block arrives (./prefill-ledger.ts).
 */
import type { HashAlgo } from '../config/types.ts';
import type { Backend } from './backend.ts';
import { type CandidateLoad, cheapest, KV_COST_DEFAULTS, type KvCostWeights, kvCost } from './kv-cost.ts';
import type { KvEventsFeed } from './kv-events-feed.ts';
import type { RouteContext, RoutingPolicy } from './policies.ts';
import type { PromptBlockHasher } from './prompt-blocks.ts';
import type { ProxyMetrics } from './proxy-metrics.ts';
import type { BackendRole } from './types.ts';

export interface KvAwareDeps {
  feed: KvEventsFeed;
  hasher: PromptBlockHasher;
  metrics: ProxyMetrics;
  weights?: KvCostWeights;
}

/** How long a routed prompt's blocks count as held by its instance before events confirm them. */
export const PENDING_MS = 60_000;

interface Scored {
  hashes: bigint[];
  blockSize: number;
  load: CandidateLoad;
}

export class KvAwarePolicy implements RoutingPolicy {
  readonly name = 'kv_aware' as const;
  readonly needsPrefixHashes = false;
  readonly #deps: KvAwareDeps;
  readonly #weights: KvCostWeights;
  readonly #turn: Record<BackendRole, number> = { prefill: 0, decode: 0 };

  constructor(deps: KvAwareDeps) {
    this.#deps = deps;
    this.#weights = deps.weights ?? KV_COST_DEFAULTS;
  }

  /** Each candidate's view of the request: its block hashes there, and the load terms of the cost. */
  score(candidates: readonly Backend[], body: Record<string, unknown>, now = Date.now()): Scored[] {
    const { feed, hasher } = this.#deps;
    const tokens = hasher.tokens(body);
    const promptTokens = tokens?.length ?? 0;
    const byKey = new Map<string, bigint[]>();
    const model = typeof body['model'] === 'string' ? body['model'] : undefined;
    return candidates.map((b) => {
      const source = feed.sourceOf(b);
      let hashes: bigint[] = [];
      if (source && tokens) {
        const base = b.info?.served_model_name;
        const lora = model !== undefined && base !== undefined && model !== base ? model : undefined;
        const key = `${source.blockSize}:${source.hashAlgo}:${lora ?? ''}`;
        hashes =
          byKey.get(key) ?? hasher.hashes(body, source.blockSize, source.hashAlgo as HashAlgo, tokens, lora);
        byKey.set(key, hashes);
      }
      const blockSize = source?.blockSize ?? 0;
      const queuedTokens = feed.ledger.queuedTokens(b.url, b.inFlight);
      const load: CandidateLoad = {
        promptTokens,
        cachedTokens: blockSize === 0 ? 0 : feed.index.prefixLength(b.url, hashes, now) * blockSize,
        queuedTokens,
        decoding: Math.max(0, b.inFlight - feed.ledger.queuedRequests(b.url)),
      };
      return { hashes, blockSize, load };
    });
  }

  /** Cached prompt tokens per candidate: reported by its events or pending (0 when its events are unknown). */
  matchedTokens(candidates: readonly Backend[], body: Record<string, unknown>, now = Date.now()): number[] {
    return this.score(candidates, body, now).map((s) => s.load.cachedTokens);
  }

  select(role: BackendRole, candidates: readonly Backend[], ctx: RouteContext): Backend {
    const now = Date.now();
    const scored = this.score(candidates, ctx.body ?? {}, now);
    const costs = scored.map((s) => kvCost(s.load, this.#weights));
    const i = cheapest(
      costs,
      candidates.map((b) => b.inFlight),
      this.#turn[role]++,
    );
    const chosen = candidates[i]!;
    const { hashes, blockSize, load } = scored[i]!;
    const { feed, metrics } = this.#deps;
    feed.index.markPending(chosen.url, hashes, now + PENDING_MS);
    // Queued until the BlockStored of its last uncached full block; a backend whose events are
    // unknown never says, so its ticket lasts while the request is in flight. A prompt whose
    // full blocks are all cached has next to nothing to prefill.
    if (blockSize === 0) feed.ledger.add(chosen.url, load.promptTokens, null);
    else if (hashes.length > load.cachedTokens / blockSize)
      feed.ledger.add(chosen.url, load.promptTokens - load.cachedTokens, hashes.at(-1)!);
    const best = Math.max(...scored.map((s) => s.load.cachedTokens));
    metrics.kvAwareRoutes.inc({ matched: best > 0 ? 'true' : 'false' });
    metrics.kvAwareMatchedTokens.inc(load.cachedTokens);
    if (load.cachedTokens < best) metrics.kvAwareLoadOverrides.inc();
    return chosen;
  }
}
