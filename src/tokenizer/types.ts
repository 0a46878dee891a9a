/** What the engine, the server and the proxy need from a tokenizer. */
export interface TokenizerLike {
  encode(text: string): number[];
  decode(ids: readonly number[]): string;
  readonly eosTokenId: number;
  readonly bosTokenId: number | null;
  readonly vocabSize: number;
  /** Chat template application: messages → prompt text. */
  applyChatTemplate(messages: ReadonlyArray<{ role: string; content: string }>): string;
}
