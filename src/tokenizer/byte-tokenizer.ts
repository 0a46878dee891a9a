/**
 * The built-in tokenizer of the presets: UTF-8 bytes are ids 0–255, BOS 256 (prepended by
 * encode), EOS 257; ids 258.. are unused padding of the vocabulary and decode to nothing.
 */

import { BYTE_BOS_TOKEN_ID, BYTE_EOS_TOKEN_ID, BYTE_VOCAB_SIZE } from '../config/model-presets.ts';
import { simpleChatTemplate } from './chat-template.ts';
import type { EncodeOptions, TokenizerLike } from './types.ts';

const encoder = new TextEncoder();

export class ByteTokenizer implements TokenizerLike {
  readonly eosTokenId = BYTE_EOS_TOKEN_ID;
  readonly bosTokenId = BYTE_BOS_TOKEN_ID;
  readonly vocabSize = BYTE_VOCAB_SIZE;

  encode(text: string, options: EncodeOptions = {}): number[] {
    const bytes = [...encoder.encode(text)];
    return (options.addSpecialTokens ?? true) ? [BYTE_BOS_TOKEN_ID, ...bytes] : bytes;
  }

  /** Invalid UTF-8 (e.g. a sequence cut inside a character) decodes to U+FFFD. */
  decode(ids: readonly number[]): string {
    const bytes = new Uint8Array(ids.length);
    let n = 0;
    for (const id of ids) if (id >= 0 && id < 256) bytes[n++] = id;
    return new TextDecoder().decode(bytes.subarray(0, n));
  }

  applyChatTemplate(messages: ReadonlyArray<{ role: string; content: string }>): string {
    return simpleChatTemplate(messages);
  }

  encodeChat(messages: ReadonlyArray<{ role: string; content: string }>): number[] {
    return this.encode(simpleChatTemplate(messages));
  }
}
