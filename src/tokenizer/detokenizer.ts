/**
 * Incremental detokenization for streaming: text is emitted only once it decodes to
 * complete characters, so a multi-byte UTF-8 character split over several tokens is
 * never emitted broken. Works for any TokenizerLike (decodes a short window of tokens).
 */
import type { TokenizerLike } from './types.ts';

const REPLACEMENT = '\uFFFD';

export class IncrementalDetokenizer {
  readonly #tokenizer: TokenizerLike;
  readonly #ids: number[] = [];
  /** Start of the window whose text has been emitted up to readOffset. */
  #prefixOffset = 0;
  #readOffset = 0;

  constructor(tokenizer: TokenizerLike) {
    this.#tokenizer = tokenizer;
  }

  /** Appends tokens; returns the newly completed text (possibly ''). */
  push(newIds: readonly number[]): string {
    for (const id of newIds) this.#ids.push(id);
    const prefix = this.#tokenizer.decode(this.#ids.slice(this.#prefixOffset, this.#readOffset));
    const full = this.#tokenizer.decode(this.#ids.slice(this.#prefixOffset));
    if (full.length <= prefix.length || full.endsWith(REPLACEMENT)) return '';
    this.#prefixOffset = this.#readOffset;
    this.#readOffset = this.#ids.length;
    return full.slice(prefix.length);
  }

  /** Text still held back (an incomplete character at the end), decoded as is. */
  flush(): string {
    const prefix = this.#tokenizer.decode(this.#ids.slice(this.#prefixOffset, this.#readOffset));
    const full = this.#tokenizer.decode(this.#ids.slice(this.#prefixOffset));
    this.#prefixOffset = this.#readOffset = this.#ids.length;
    return full.slice(prefix.length);
  }
}
