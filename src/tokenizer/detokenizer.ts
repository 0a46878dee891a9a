/**
 * Incremental detokenization for streaming. `IncrementalText` gives the text of a growing
 * list of token ids — the text `tokenizer.decode(ids)` gives — while decoding only a short
 * window of the last tokens per call, so a long generation costs the same per token as a
 * short one. `IncrementalDetokenizer` streams that text and emits it only once it decodes to
 * complete characters, so a multi-byte UTF-8 character split over several tokens is never
 * emitted broken. Both work for any TokenizerLike.
 */
import type { TokenizerLike } from './types.ts';

const REPLACEMENT = '\uFFFD';

/** Tokens decoded before the new ones when the window restarts (their text is context only). */
const CONTEXT_TOKENS = 4;

/**
 * The text of ids[0, readOffset) is `committed`; the tokens from prefixOffset to readOffset
 * (`prefixText` once decoded) are context for the tokens after them: the text of the new
 * tokens is what decoding from prefixOffset adds to prefixText (vLLM's prefix/read offsets).
 * A decoder's context reaches one token back (spaces between tokens, cleanup before
 * punctuation, bytes of a character); only the start of the whole text is special (a
 * stripped leading space), so a window whose context decodes to nothing while text was
 * already committed, or whose text does not extend its context's, is decoded whole instead.
 */
export class IncrementalText {
  readonly #tokenizer: TokenizerLike;
  #committed = '';
  #prefixOffset = 0;
  #readOffset = 0;
  #prefixText = '';

  constructor(tokenizer: TokenizerLike) {
    this.#tokenizer = tokenizer;
  }

  /**
   * The text of `ids`, which must extend the ids of the previous call (the same ids first,
   * possibly none new).
   */
  textOf(ids: readonly number[]): string {
    const n = ids.length;
    if (n < this.#readOffset) return this.#restart(ids);
    const window = this.#tokenizer.decode(ids.slice(this.#prefixOffset, n));
    const prefix = this.#prefixText;
    if ((prefix === '' && this.#committed !== '') || !window.startsWith(prefix)) return this.#restart(ids);
    const text = this.#committed + window.slice(prefix.length);
    // A text that ends in an incomplete character is not committed: the next token may complete it.
    if (n > this.#readOffset && !text.endsWith(REPLACEMENT)) {
      this.#committed = text;
      this.#prefixText = this.#tokenizer.decode(ids.slice(this.#readOffset, n));
      this.#prefixOffset = this.#readOffset;
      this.#readOffset = n;
    }
    return text;
  }

  /** Decodes all of `ids` and starts a new window at its last tokens. */
  #restart(ids: readonly number[]): string {
    const n = ids.length;
    const text = this.#tokenizer.decode(ids);
    this.#committed = text;
    this.#prefixOffset = Math.max(0, n - CONTEXT_TOKENS);
    this.#readOffset = n;
    this.#prefixText = this.#tokenizer.decode(ids.slice(this.#prefixOffset, n));
    return text;
  }
}

export class IncrementalDetokenizer {
  readonly #ids: number[] = [];
  readonly #text: IncrementalText;
  /** Characters already emitted. */
  #emitted = 0;

  constructor(tokenizer: TokenizerLike) {
    this.#text = new IncrementalText(tokenizer);
  }

  /** Appends tokens; returns the newly completed text (possibly ''). */
  push(newIds: readonly number[]): string {
    for (const id of newIds) this.#ids.push(id);
    const text = this.#text.textOf(this.#ids);
    if (text.length <= this.#emitted || text.endsWith(REPLACEMENT)) return '';
    return this.#take(text);
  }

  /** Text still held back (an incomplete character at the end), decoded as is. */
  flush(): string {
    return this.#take(this.#text.textOf(this.#ids));
  }

  #take(text: string): string {
    const out = text.slice(this.#emitted);
    this.#emitted = Math.max(this.#emitted, text.length);
    return out;
  }
}
