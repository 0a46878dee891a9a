/**
 * Token sampling from one row of logits: greedy (temperature 0), temperature, top-k,
 * top-p, with a per-request seeded PRNG, plus the logprob of the chosen token and the
 * top-N logprobs. Logprobs are of the model's raw distribution (before temperature and
 * truncation), as vLLM reports them by default. Scratch buffers are reused across calls.
 */
import { randomInt } from 'node:crypto';
import { SeededRandom } from '../model/prng.ts';

export interface SamplerParams {
  /** 0 = greedy. */
  temperature: number;
  /** 0 or -1 = disabled. */
  topK: number;
  /** 1 = disabled. */
  topP: number;
  /** Number of top logprobs to return (0..20), or null for none. */
  logprobs: number | null;
}

export interface TokenLogprob {
  tokenId: number;
  logprob: number;
}

export interface SampledToken {
  tokenId: number;
  /**
   * Logprob of the chosen token under the raw distribution; null when the params ask for no
   * logprobs (the normalizer over the vocabulary is then never computed).
   */
  logprob: number | null;
  topLogprobs: TokenLogprob[] | null;
}

/** The PRNG of one request: seeded when `seed` is given, else from the OS. */
export function requestRandom(seed: number | null): SeededRandom {
  return new SeededRandom(seed ?? randomInt(0, 2 ** 32));
}

export class Sampler {
  #order = new Int32Array(0);
  #probs = new Float64Array(0);

  /**
   * Samples from `processed` when given (logits after the request's logits processors), else
   * from `logits`; logprobs are always of `logits`, the raw distribution, and only computed
   * when `params.logprobs` asks for them (0: the chosen token's alone).
   */
  sample(
    logits: Float32Array,
    params: SamplerParams,
    rng: SeededRandom,
    processed: Float32Array | null = null,
  ): SampledToken {
    const tokenId = this.#choose(processed ?? logits, params, rng);
    if (params.logprobs === null) return { tokenId, logprob: null, topLogprobs: null };
    const logZ = logSumExp(logits);
    return {
      tokenId,
      logprob: (logits[tokenId] as number) - logZ,
      topLogprobs: params.logprobs <= 0 ? null : topLogprobs(logits, logZ, params.logprobs),
    };
  }

  /** The token a row of logits yields under the params (greedy or random). */
  #choose(logits: Float32Array, params: SamplerParams, rng: SeededRandom): number {
    let max = Number.NEGATIVE_INFINITY;
    let argmax = 0;
    for (let i = 0; i < logits.length; i++) {
      const v = logits[i] as number;
      if (v > max) {
        max = v;
        argmax = i;
      }
    }
    return params.temperature <= 1e-5 ? argmax : this.#sampleRandom(logits, max, params, rng);
  }

  #sampleRandom(logits: Float32Array, max: number, params: SamplerParams, rng: SeededRandom): number {
    const n = logits.length;
    if (this.#order.length < n) {
      this.#order = new Int32Array(n);
      this.#probs = new Float64Array(n);
    }
    const probs = this.#probs;
    const invT = 1 / params.temperature;
    for (let i = 0; i < n; i++) probs[i] = Math.exp(((logits[i] as number) - max) * invT);
    const topK = params.topK > 0 ? Math.min(params.topK, n) : n;
    const truncating = topK < n || params.topP < 1;
    if (!truncating) return drawFrom(probs, n, rng);
    const order = this.#order.subarray(0, n);
    for (let i = 0; i < n; i++) order[i] = i;
    order.sort((a, b) => (probs[b] as number) - (probs[a] as number) || a - b);
    let total = 0;
    for (let i = 0; i < topK; i++) total += probs[order[i] as number] as number;
    let keep = topK;
    if (params.topP < 1) {
      let cum = 0;
      for (let i = 0; i < topK; i++) {
        cum += probs[order[i] as number] as number;
        if (cum >= params.topP * total) {
          keep = i + 1;
          break;
        }
      }
    }
    let kept = 0;
    for (let i = 0; i < keep; i++) kept += probs[order[i] as number] as number;
    let u = rng.nextFloat() * kept;
    for (let i = 0; i < keep; i++) {
      const id = order[i] as number;
      u -= probs[id] as number;
      if (u < 0) return id;
    }
    return order[keep - 1] as number;
  }
}

function drawFrom(probs: Float64Array, n: number, rng: SeededRandom): number {
  let total = 0;
  for (let i = 0; i < n; i++) total += probs[i] as number;
  let u = rng.nextFloat() * total;
  let last = 0;
  for (let i = 0; i < n; i++) {
    const p = probs[i] as number;
    if (p > 0) last = i;
    u -= p;
    if (u < 0) return i;
  }
  return last;
}

/** The `count` most likely tokens, most likely first. */
export function topLogprobs(logits: Float32Array, logZ: number, count: number): TokenLogprob[] {
  const k = Math.min(count, logits.length);
  const ids: number[] = [];
  for (let i = 0; i < logits.length; i++) {
    const v = logits[i] as number;
    if (ids.length === k && v <= (logits[ids[k - 1] as number] as number)) continue;
    let at = ids.length === k ? k - 1 : ids.length;
    if (ids.length < k) ids.push(i);
    while (at > 0 && (logits[ids[at - 1] as number] as number) < v) {
      ids[at] = ids[at - 1] as number;
      at--;
    }
    ids[at] = i;
  }
  return ids.map((id) => ({ tokenId: id, logprob: (logits[id] as number) - logZ }));
}

/** log Σ exp(logits): the normalizer of the raw distribution. */
export function logSumExp(logits: Float32Array): number {
  let max = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < logits.length; i++) max = Math.max(max, logits[i] as number);
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp((logits[i] as number) - max);
  return max + Math.log(sum);
}

/** The logprob and 1-based rank of `tokenId` under one row of logits, with the top `count`. */
export function positionLogprobs(
  logits: Float32Array,
  tokenId: number,
  count: number,
): { tokenId: number; logprob: number; rank: number; top: TokenLogprob[] } {
  const logZ = logSumExp(logits);
  const v = logits[tokenId] as number;
  let rank = 1;
  for (let i = 0; i < logits.length; i++) if ((logits[i] as number) > v) rank++;
  return { tokenId, logprob: v - logZ, rank, top: count > 0 ? topLogprobs(logits, logZ, count) : [] };
}
