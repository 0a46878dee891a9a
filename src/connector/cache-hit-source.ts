/**
 * Where a cached prompt token's KV came from, as vLLM's CacheHitSource labels
 * vllm:prompt_tokens_cached_by_source: the engine's own prefix cache (`device`), host
 * memory (`host`), a peer (`p2p`), local disk (`disk`), or a connector that does not say
 * (`external_unspecified`). Listed fastest to slowest: a token whose KV needs several
 * sources counts under the slowest of them.
 */
export const CACHE_HIT_SOURCES = ['device', 'host', 'p2p', 'disk', 'external_unspecified'] as const;

export type CacheHitSource = (typeof CACHE_HIT_SOURCES)[number];

/** Token counts by source; absent sources count 0. */
export type CachedTokensBySource = Partial<Record<CacheHitSource, number>>;

/** The slowest of the sources (a token needs KV from all of them). */
export function slowestSource(sources: Iterable<CacheHitSource>): CacheHitSource {
  let rank = 0;
  for (const s of sources) rank = Math.max(rank, CACHE_HIT_SOURCES.indexOf(s));
  return CACHE_HIT_SOURCES[rank] as CacheHitSource;
}

/** Adds `tokens` under `source` in place. */
export function addCachedTokens(into: CachedTokensBySource, source: CacheHitSource, tokens: number): void {
  if (tokens > 0) into[source] = (into[source] ?? 0) + tokens;
}

/**
 * The counts cut down to `total` tokens, taken off the slowest sources first (the tail of a
 * prefix is the part loaded from the deepest tier).
 */
export function trimCachedTokens(counts: CachedTokensBySource, total: number): CachedTokensBySource {
  const out: CachedTokensBySource = {};
  let left = Math.max(0, total);
  for (const source of CACHE_HIT_SOURCES) {
    const n = Math.min(counts[source] ?? 0, left);
    addCachedTokens(out, source, n);
    left -= n;
  }
  return out;
}
