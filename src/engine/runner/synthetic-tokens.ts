/**
 * Tokens without a model, for `--mode random|echo` (llm-d-inference-sim's modes), fed to the
 * model-free SimulatedExecutor. Every token is a pure function of (seed, prompt token ids,
 * output position), so a request served disaggregated, retried or resumed produces exactly
 * the tokens of one plain engine.
 *
 * - `random`: the response length is drawn from the sim's six-bucket histogram over
 *   max_tokens (20/30/20/5/10/15 %; for max_tokens above 101, bucket 4 stretches and the
 *   others are 20 tokens wide), or is max_tokens with ignore_eos; the text is a walk through
 *   a bank of plain English sentences starting at a prompt-dependent place; end-of-sequence
 *   follows the last token.
 * - `echo`: the prompt's tokens, then end-of-sequence (max_tokens still caps the output).
 */
import { mulberry32 } from '../../util/mulberry32.ts';

export type SyntheticMode = 'random' | 'echo';

export interface SyntheticRequestView {
  promptTokenIds: readonly number[];
  numOutputTokens: number;
  sampling: { maxTokens: number; ignoreEos: boolean };
}

/** Text the random mode cycles through (tokenized once with the served tokenizer). */
export const RANDOM_MODE_TEXT = [
  'The river runs past the mill and under the old stone bridge.',
  'A key-value cache keeps what attention has already computed.',
  'Routers send each request where its prefix is already warm.',
  'Decode servers stream tokens while prefill servers read prompts.',
  'The morning train was late, so the meeting started without coffee.',
  'Every block carries a checksum that the receiver verifies.',
  'Bright lanterns lined the harbour as the boats came home.',
  'Schedulers batch requests so that one pass serves many users.',
].join(' ');

const BUCKET_PROBABILITIES = [0.2, 0.3, 0.2, 0.05, 0.1, 0.15];
const FLEX_BUCKET = 3;
const FIXED_BUCKET_SIZE = 20;

/** FNV-1a over the seed and the prompt's token ids: the request's generator seed. */
function promptKey(seed: number, tokens: readonly number[]): number {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (const t of tokens) {
    h = Math.imul(h ^ (t & 0xffff), 0x01000193) >>> 0;
    h = Math.imul(h ^ (t >>> 16), 0x01000193) >>> 0;
  }
  return h;
}

/** An integer in [min, max], both included. */
function randomInt(rand: () => number, min: number, max: number): number {
  return min + Math.floor(rand() * (max - min + 1));
}

/** The sim's response length for a request with max_tokens: its six-bucket histogram. */
export function histogramLength(maxTokens: number, rand: () => number): number {
  if (maxTokens <= 1) return maxTokens;
  const n = BUCKET_PROBABILITIES.length;
  if (maxTokens <= n) return randomInt(rand, 1, maxTokens);
  const r = rand();
  let cumulative = 0;
  let bucket = n - 1;
  for (let i = 0; i < n; i++) {
    cumulative += BUCKET_PROBABILITIES[i] as number;
    if (i === n - 2 && r > cumulative) return maxTokens;
    if (r <= cumulative) {
      bucket = i;
      break;
    }
  }
  const [start, end] = bucketBounds(maxTokens, bucket, n);
  return randomInt(rand, start, end);
}

function bucketBounds(maxTokens: number, bucket: number, n: number): [number, number] {
  let start: number;
  let end: number;
  if (maxTokens <= FIXED_BUCKET_SIZE * (n - 1) + 1) {
    const size = (maxTokens - 1) / (n - 1);
    start = Math.trunc(size * bucket) + 1;
    end = Math.trunc(size * (bucket + 1));
  } else {
    const flexSize = maxTokens - FIXED_BUCKET_SIZE * (n - 2);
    if (bucket < FLEX_BUCKET) {
      start = FIXED_BUCKET_SIZE * bucket + 1;
      end = FIXED_BUCKET_SIZE * (bucket + 1);
    } else if (bucket === FLEX_BUCKET) {
      start = FIXED_BUCKET_SIZE * bucket + 1;
      end = FIXED_BUCKET_SIZE * bucket + flexSize;
    } else {
      start = FIXED_BUCKET_SIZE * (bucket - 1) + flexSize + 1;
      end = FIXED_BUCKET_SIZE * bucket + flexSize;
    }
  }
  return [start, Math.min(end, maxTokens - 1)];
}

export class SyntheticTokens {
  readonly #mode: SyntheticMode;
  readonly #bank: readonly number[];
  readonly #eos: number | null;
  readonly #seed: number;
  /** Per prompt: where the walk starts and how long the answer is (computed once per request). */
  readonly #plans = new WeakMap<readonly number[], { start: number; length: number }>();

  constructor(mode: SyntheticMode, bank: readonly number[], eosTokenId: number | null, seed: number) {
    if (bank.length === 0) throw new Error('the random mode needs a non-empty token bank');
    this.#mode = mode;
    this.#bank = bank;
    this.#eos = eosTokenId;
    this.#seed = seed >>> 0;
  }

  /** The token at the request's next output position. */
  next(req: SyntheticRequestView): number {
    const k = req.numOutputTokens;
    const { maxTokens, ignoreEos } = req.sampling;
    const prompt = req.promptTokenIds;
    if (this.#mode === 'echo') {
      if (k < prompt.length) return prompt[k] as number;
      return this.#eos !== null && !ignoreEos ? this.#eos : (prompt[k % prompt.length] as number);
    }
    let plan = this.#plans.get(prompt);
    if (!plan) {
      const rand = mulberry32(promptKey(this.#seed, prompt));
      const start = Math.floor(rand() * this.#bank.length);
      plan = { start, length: ignoreEos ? maxTokens : histogramLength(maxTokens, rand) };
      this.#plans.set(prompt, plan);
    }
    if (k >= plan.length && this.#eos !== null && !ignoreEos) return this.#eos;
    return this.#bank[(plan.start + k) % this.#bank.length] as number;
  }
}
