/**
 * A HF `tokenizer.json` (plus optional `tokenizer_config.json`) through the
 * @huggingface/tokenizers package, behind the TokenizerLike interface.
 */
import { Tokenizer } from '@huggingface/tokenizers';
import { KVError } from '../errors/index.ts';
import { simpleChatTemplate } from './chat-template.ts';
import type { TokenizerLike } from './types.ts';

export interface HFTokenizerOptions {
  /** Parsed tokenizer_config.json ({} when absent). */
  tokenizerConfig?: Record<string, unknown>;
  /** From the model's config.json, used when tokenizer_config.json names no tokens. */
  bosTokenId?: number | null;
  eosTokenId?: number | null;
}

function tokenContent(value: unknown): string | null {
  if (typeof value === 'string') return value;
  if (
    value !== null &&
    typeof value === 'object' &&
    typeof (value as { content?: unknown }).content === 'string'
  ) {
    return (value as { content: string }).content;
  }
  return null;
}

export class HFTokenizer implements TokenizerLike {
  readonly eosTokenId: number;
  readonly bosTokenId: number | null;
  readonly vocabSize: number;
  private readonly tokenizer: Tokenizer;
  private readonly unkTokenId: number | null;

  constructor(tokenizerJson: object, options: HFTokenizerOptions = {}) {
    const config = options.tokenizerConfig ?? {};
    this.tokenizer = new Tokenizer(tokenizerJson, config);
    const idOf = (key: string): number | null => {
      const content = tokenContent(config[key]);
      return content === null ? null : (this.tokenizer.token_to_id(content) ?? null);
    };
    this.bosTokenId = idOf('bos_token') ?? options.bosTokenId ?? null;
    this.eosTokenId = idOf('eos_token') ?? options.eosTokenId ?? -1;
    let max = -1;
    for (const id of this.tokenizer.get_vocab(true).values()) if (id > max) max = id;
    this.vocabSize = max + 1;
    const unk = (tokenizerJson as { model?: { unk_token?: unknown } }).model?.unk_token;
    this.unkTokenId = typeof unk === 'string' ? (this.tokenizer.token_to_id(unk) ?? null) : null;
  }

  /** Adds the special tokens the tokenizer's post-processor defines (e.g. BOS). */
  encode(text: string): number[] {
    // Some models of the library leave out-of-vocabulary pieces undefined; map them to <unk>.
    const ids = this.tokenizer.encode(text).ids as (number | undefined)[];
    return ids.map((id) => {
      if (id !== undefined) return id;
      if (this.unkTokenId !== null) return this.unkTokenId;
      throw new KVError(
        'TOKENIZER_INVALID',
        `The tokenizer has no id for a piece of ${JSON.stringify(text)} and no unk_token`,
        {
          hint: 'Use a tokenizer.json whose model defines unk_token, or a byte-level BPE tokenizer.',
        },
      );
    });
  }

  decode(ids: readonly number[]): string {
    if (ids.length === 0) return '';
    return this.tokenizer.decode([...ids], { skip_special_tokens: true });
  }

  applyChatTemplate(messages: ReadonlyArray<{ role: string; content: string }>): string {
    return simpleChatTemplate(messages);
  }
}
