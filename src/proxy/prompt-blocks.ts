/**
 * The block hashes an engine will compute for a request, computed in the proxy: the prompt
 * tokenized with the model's tokenizer (as the server does: a string is encoded, token ids
 * are taken as they are, chat messages go through the chat template), then hashed with
 * src/kv's block hasher (same algorithm, NONE_HASH, block size, LoRA and cache-salt extra keys),
 * in the external 64-bit form KV events carry.
 */

import type { HashAlgo } from '../config/types.ts';
import { externalBlockHash } from '../kv/block-hash.ts';
import { BlockHasher } from '../kv/block-hasher.ts';
import type { TokenizerLike } from '../tokenizer/types.ts';

type Json = Record<string, unknown>;

function messageText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => (typeof part === 'object' && part !== null ? (part as Json)['text'] : undefined))
      .filter((t): t is string => typeof t === 'string')
      .join('');
  }
  return '';
}

/** The request's (first) prompt as token ids, or null when the body has none the proxy can read. */
export function promptTokenIds(body: Json, tokenizer: TokenizerLike): number[] | null {
  const prompt = body['prompt'];
  if (typeof prompt === 'string') return tokenizer.encode(prompt);
  if (Array.isArray(prompt) && prompt.length > 0) {
    if (prompt.every((t) => typeof t === 'number')) return prompt as number[];
    const first = prompt[0];
    if (typeof first === 'string') return tokenizer.encode(first);
    if (Array.isArray(first) && first.every((t) => typeof t === 'number')) return first as number[];
    return null;
  }
  const messages = body['messages'];
  if (Array.isArray(messages) && messages.length > 0) {
    const turns = messages
      .filter((m): m is Json => typeof m === 'object' && m !== null)
      .map((m) => ({ role: String(m['role']), content: messageText(m['content']) }));
    // Rendered as the server renders it (its chat options; a request template only when it is
    // a string: a server that refuses it answers 400 anyway).
    const bool = (key: string, fallback: boolean): boolean =>
      typeof body[key] === 'boolean' ? (body[key] as boolean) : fallback;
    const template = body['chat_template'];
    try {
      return tokenizer.encodeChat(turns, {
        addGenerationPrompt: bool('add_generation_prompt', true),
        continueFinalMessage: bool('continue_final_message', false),
        chatTemplate: typeof template === 'string' ? template : null,
      });
    } catch {
      // A template the server will refuse too: route without prefix knowledge.
      return null;
    }
  }
  return null;
}

export class PromptBlockHasher {
  readonly tokenizer: TokenizerLike;
  readonly #hashers = new Map<string, BlockHasher>();

  constructor(tokenizer: TokenizerLike) {
    this.tokenizer = tokenizer;
  }

  /** The request's prompt as token ids (null when the body has none the proxy can read). */
  tokens(body: Json): number[] | null {
    return promptTokenIds(body, this.tokenizer);
  }

  /**
   * External hashes of the prompt's full blocks for engines with this block size and
   * algorithm; `loraName`: the adapter the request runs with there (an extra key of every block).
   */
  hashes(
    body: Json,
    blockSize: number,
    algo: HashAlgo,
    tokens = this.tokens(body),
    loraName?: string,
  ): bigint[] {
    if (!tokens || tokens.length < blockSize) return [];
    const key = `${blockSize}:${algo}`;
    let hasher = this.#hashers.get(key);
    if (!hasher) {
      hasher = new BlockHasher(blockSize, algo);
      this.#hashers.set(key, hasher);
    }
    const salt = body['cache_salt'];
    return hasher
      .newHashes({
        allTokenIds: tokens,
        blockHashes: [],
        cacheSalt: typeof salt === 'string' ? salt : undefined,
        loraName,
      })
      .map(externalBlockHash);
  }
}
