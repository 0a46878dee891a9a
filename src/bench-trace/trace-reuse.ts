/**
 * What a Mooncake trace can reuse, computed from the file alone (no engine), and the token
 * ids a replay synthesises: every hash id stands for one 512-token block, the same id for
 * the same tokens, so equal id prefixes become equal token prefixes.
 */
import { TRACE_BLOCK_TOKENS, type TraceEntry } from '../bench-serve/trace.ts';

/** Token ids of one trace request (its hash ids expanded; ids past the list are unique to it). */
export function traceTokens(
  entry: TraceEntry,
  uniqueBase: number,
  blockTokens = TRACE_BLOCK_TOKENS,
): number[] {
  const n = entry.inputLength;
  const tokens = new Array<number>(n);
  for (let block = 0, start = 0; start < n; block++, start += blockTokens) {
    const first = (entry.hashIds[block] ?? uniqueBase + block) * blockTokens;
    const end = Math.min(n, start + blockTokens);
    for (let i = start; i < end; i++) tokens[i] = first + (i - start);
  }
  return tokens;
}

/** First id no trace hash id uses (base for the ids of blocks the trace lists none for). */
export function firstUnusedId(entries: readonly TraceEntry[]): number {
  let max = -1;
  for (const e of entries) for (const id of e.hashIds) if (id > max) max = id;
  return max + 1;
}

export interface TraceReuse {
  promptTokens: number;
  /** The trace's own reuse: leading hash ids seen before × 512, capped at the input length. */
  traceHitTokens: number;
  /**
   * What an unbounded prefix cache of `blockSize`-token blocks can hit, requests served one
   * after another: only full blocks are cached, and the last prompt token is always computed.
   */
  engineHitTokens: number;
}

/** Both reuse figures of a trace, in its request order. */
export function traceReuse(entries: readonly TraceEntry[], blockSize: number): TraceReuse {
  const seen = new Set<number>();
  /** Per hash id: how many of its tokens sit in full cached blocks. */
  const cachedTokens = new Map<number, number>();
  let promptTokens = 0;
  let traceHitTokens = 0;
  let engineHitTokens = 0;
  for (const e of entries) {
    promptTokens += e.inputLength;
    let leading = 0;
    while (leading < e.hashIds.length && seen.has(e.hashIds[leading]!)) leading++;
    traceHitTokens += Math.min(leading * TRACE_BLOCK_TOKENS, e.inputLength);

    const maxHit = Math.floor((e.inputLength - 1) / blockSize) * blockSize;
    let hit = 0;
    for (let k = 0; k < e.hashIds.length && hit < maxHit; k++) {
      const start = k * TRACE_BLOCK_TOKENS;
      const have = cachedTokens.get(e.hashIds[k]!) ?? 0;
      // A block straddling two hash ids is a hit only if the next id's part is cached too.
      hit = Math.max(hit, Math.floor((start + have) / blockSize) * blockSize);
      if (have < TRACE_BLOCK_TOKENS) break;
    }
    engineHitTokens += Math.min(hit, maxHit);

    const full = Math.floor(e.inputLength / blockSize) * blockSize;
    e.hashIds.forEach((id, k) => {
      seen.add(id);
      const inBlock = Math.max(0, Math.min(TRACE_BLOCK_TOKENS, full - k * TRACE_BLOCK_TOKENS));
      if (inBlock > (cachedTokens.get(id) ?? 0)) cachedTokens.set(id, inBlock);
    });
  }
  return { promptTokens, traceHitTokens, engineHitTokens };
}
