import type { ChatRenderOptions } from './chat-template.ts';

/** What the engine, the server and the proxy need from a tokenizer. */
export interface EncodeOptions {
  /** Add the tokenizer's special tokens (BOS, ...); default true. */
  addSpecialTokens?: boolean;
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
  /** vLLM's /tokenizer_info: the tokenizer's configuration and class. */
  describe?(): Record<string, unknown>;
}
