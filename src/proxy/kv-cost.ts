/**
 * kv_aware's cost of sending a request to one backend: roughly the prompt tokens that
 * backend must compute before this request's first token. The lowest cost wins.
 *
 *   cost = queued + prompt − overlapCredit × cached + runningCost × decoding
 *
 * - queued: uncached prompt tokens of the requests already routed there and not prefilled
 *   yet (./prefill-ledger.ts): the queue this request waits behind.
 * - prompt − cached: this request's own uncached tokens (cached = its leading tokens the
 *   backend holds, from its KV events or pending).
 * - decoding: the backend's other requests in flight, past their prefill; each adds a token
 *   (and attention over its context) to every step the new prefill runs in.
 *
 * This is the shape of Dynamo's KV router cost (prefill blocks of active and incoming work,
 * less the overlap, plus decode load), in tokens. Dynamo charges every active KV block of a
 * running request as decode load, which suits GPUs where decode is memory-bound; on this
 * CPU engine a decoding request costs a few tokens of compute per step, so it is charged
 * `runningCost` tokens. An overlap credit above 1 values a cached token above the compute it
 * saves (favouring hit rate over balance, as Dynamo's overlap weight does); 1 is exact.
 */
import { PROXY_DEFAULTS } from './types.ts';

export interface KvCostWeights {
  /** Queued-prefill tokens one cached prompt token is worth (1 = the compute it saves). */
  overlapCredit: number;
  /** Tokens charged per request in flight on the backend that has finished its prefill. */
  runningCost: number;
}

export const KV_COST_DEFAULTS: KvCostWeights = {
  overlapCredit: PROXY_DEFAULTS.kvAwareOverlapCredit,
  runningCost: PROXY_DEFAULTS.kvAwareRunningCost,
};

export interface CandidateLoad {
  promptTokens: number;
  cachedTokens: number;
  queuedTokens: number;
  decoding: number;
}

export function kvCost(c: CandidateLoad, w: KvCostWeights): number {
  return c.queuedTokens + c.promptTokens - w.overlapCredit * c.cachedTokens + w.runningCost * c.decoding;
}

/** Index of the lowest cost; equal costs go to the fewest in flight, then in turn from `turn`. */
export function cheapest(costs: readonly number[], inFlight: readonly number[], turn: number): number {
  const n = costs.length;
  let best = turn % n;
  for (let k = 1; k < n; k++) {
    const i = (turn + k) % n;
    if (costs[i]! < costs[best]! || (costs[i] === costs[best] && inFlight[i]! < inFlight[best]!)) best = i;
  }
  return best;
}
