/**
 * One request's grammar state: XGrammar's matcher, the bitmask of the tokens it allows next,
 * and the masking of a row of logits with it. The mask is computed before each sampling
 * step (XGrammar's JS API returns it asynchronously) and used for exactly the step after the
 * last accepted token.
 */
import type { GrammarMatcher } from '@mlc-ai/web-xgrammar';
import { getLogger } from '../../logging/logger.ts';

const log = getLogger('kvconnect.engine.structured.matcher');

export class RequestGrammar {
  readonly #matcher: GrammarMatcher;
  readonly #vocabSize: number;

  constructor(matcher: GrammarMatcher, vocabSize: number) {
    this.#matcher = matcher;
    this.#vocabSize = vocabSize;
  }

  /** True once the grammar accepted its stop token: nothing constrains the output any more. */
  get terminated(): boolean {
    return this.#matcher.isTerminated();
  }

  /** The bitmask of allowed next tokens (bit i of word i >> 5 set = token i allowed). */
  nextMask(): Promise<Int32Array> {
    return this.#matcher.getNextTokenBitmask();
  }

  /** Sets every token the mask forbids to -Infinity, in place. */
  maskLogits(logits: Float32Array, mask: Int32Array): void {
    const n = Math.min(logits.length, this.#vocabSize);
    for (let i = 0; i < n; i++)
      if ((((mask[i >> 5] as number) >>> (i & 31)) & 1) === 0) logits[i] = Number.NEGATIVE_INFINITY;
    for (let i = n; i < logits.length; i++) logits[i] = Number.NEGATIVE_INFINITY;
  }

  /** Advances past a sampled token; false (and logged) when the grammar rejects it. */
  accept(tokenId: number): boolean {
    if (this.#matcher.isTerminated()) return true;
    const ok = this.#matcher.acceptToken(tokenId);
    if (!ok) log.warn(`the grammar rejected token ${tokenId}; the output no longer follows the constraint`);
    return ok;
  }

  dispose(): void {
    this.#matcher.dispose();
  }
}
