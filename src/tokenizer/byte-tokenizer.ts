/**
 * The built-in tokenizer of the presets: UTF-8 bytes are ids 0–255, BOS 256 (prepended by
 * encode), EOS 257; ids 258.. are unused padding of the vocabulary and decode to nothing.
 *
 * A checkpoint without `tokenizer.json` gets the same byte mapping of text with its own
 * vocabulary: every id below the checkpoint's `vocab_size` is a valid prompt token (the model
 * can generate any of them), and BOS/EOS are the checkpoint's (`config.json`); the special
 * ids decode to nothing, as vLLM skips special tokens.
 */

import { BYTE_BOS_TOKEN_ID, BYTE_EOS_TOKEN_ID, BYTE_VOCAB_SIZE } from '../config/model-presets.ts';
import {
  type ChatMessage,
  type ChatRenderOptions,
  JinjaChatTemplate,
  simpleChatTemplate,
} from './chat-template.ts';
import type { EncodeOptions, GrammarVocabulary, TokenizerLike } from './types.ts';

const encoder = new TextEncoder();

export interface ByteVocabulary {
  vocabSize: number;
  bosTokenId: number | null;
  eosTokenId: number;
}

export class ByteTokenizer implements TokenizerLike {
  readonly eosTokenId: number;
  readonly bosTokenId: number | null;
  readonly vocabSize: number;

  constructor(
    vocabulary: ByteVocabulary = {
      vocabSize: BYTE_VOCAB_SIZE,
      bosTokenId: BYTE_BOS_TOKEN_ID,
      eosTokenId: BYTE_EOS_TOKEN_ID,
    },
  ) {
    this.vocabSize = vocabulary.vocabSize;
    this.bosTokenId = vocabulary.bosTokenId;
    this.eosTokenId = vocabulary.eosTokenId;
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    const bytes = [...encoder.encode(text)];
    return (options.addSpecialTokens ?? true) && this.bosTokenId !== null
      ? [this.bosTokenId, ...bytes]
      : bytes;
  }

  /** Ids 0–255 are the bytes (XGrammar's `<0xNN>` byte tokens); every other id is special. */
  grammarVocabulary(): GrammarVocabulary {
    const tokens = Array.from({ length: this.vocabSize }, (_, id) =>
      id < 256 && id !== this.bosTokenId && id !== this.eosTokenId
        ? `<0x${id.toString(16).toUpperCase().padStart(2, '0')}>`
        : '',
    );
    return { tokens, kind: 'byte_fallback', prependSpace: false };
  }

  /** Invalid UTF-8 (e.g. a sequence cut inside a character) decodes to U+FFFD. */
  decode(ids: readonly number[]): string {
    const bytes = new Uint8Array(ids.length);
    let n = 0;
    for (const id of ids) {
      if (id >= 0 && id < 256 && id !== this.bosTokenId && id !== this.eosTokenId) bytes[n++] = id;
    }
    return new TextDecoder().decode(bytes.subarray(0, n));
  }

  /**
   * /tokenizer_info for a model without tokenizer files: kvconnect's byte mapping has no
   * transformers configuration, so it names itself and its special ids.
   */
  describe(): Record<string, unknown> {
    return {
      tokenizer_class: 'ByteTokenizer',
      vocab_size: this.vocabSize,
      bos_token_id: this.bosTokenId,
      eos_token_id: this.eosTokenId,
    };
  }

  /**
   * A request's own template is rendered as the HF tokenizer renders one; byte ids have no
   * special-token strings for it to write, so BOS is always added by encode().
   */
  applyChatTemplate(messages: ReadonlyArray<ChatMessage>, options: ChatRenderOptions = {}): string {
    if (options.chatTemplate == null) return simpleChatTemplate(messages, options);
    return new JinjaChatTemplate(options.chatTemplate, {}, 'the request').render(messages, options);
  }

  encodeChat(messages: ReadonlyArray<ChatMessage>, options: ChatRenderOptions = {}): number[] {
    return this.encode(this.applyChatTemplate(messages, options));
  }
}
