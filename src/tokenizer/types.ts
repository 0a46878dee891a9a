import type { ChatRenderOptions } from './chat-template.ts';

/** What the engine, the server and the proxy need from a tokenizer. */
export interface EncodeOptions {
  /** Add the tokenizer's special tokens (BOS, ...); default true. */
  addSpecialTokens?: boolean;
}

/**
 * A vocabulary in XGrammar's terms: every id's token as stored in the tokenizer, and how those
 * strings map to bytes (`byte_level`: GPT-2's byte-to-unicode alphabet; `byte_fallback`:
 * `<0xNN>` byte tokens and `▁` for spaces; `raw`: the text itself). Special tokens are empty
 * strings, which XGrammar never lets a grammar produce.
 */
export interface GrammarVocabulary {
  tokens: string[];
  kind: 'raw' | 'byte_fallback' | 'byte_level';
  /** The tokenizer prepends a space to the text (SentencePiece's add_dummy_prefix). */
  prependSpace: boolean;
}

export interface TokenizerLike {
  encode(text: string, options?: EncodeOptions): number[];
  decode(ids: readonly number[]): string;
  readonly eosTokenId: number;
  readonly bosTokenId: number | null;
  readonly vocabSize: number;
  /** Chat template application: messages → prompt text. */
  applyChatTemplate(
    messages: ReadonlyArray<{ role: string; content: string }>,
    options?: ChatRenderOptions,
  ): string;
  /**
   * Messages → prompt token ids as the chat endpoint tokenizes them: a model's own
   * template without added special tokens (it writes them), the fallback template with.
   */
  encodeChat(
    messages: ReadonlyArray<{ role: string; content: string }>,
    options?: ChatRenderOptions,
  ): number[];
  /** The vocabulary as XGrammar's TokenizerInfo reads it (grammar-constrained decoding). */
  grammarVocabulary?(): GrammarVocabulary;
  /** vLLM's /tokenizer_info: the tokenizer's configuration and class. */
  describe?(): Record<string, unknown>;
}
