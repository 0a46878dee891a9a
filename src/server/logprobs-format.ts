/**
 * OpenAI's logprobs shapes as vLLM fills them: legacy completions (parallel arrays), chat
 * (a content list) and `prompt_logprobs` (one `{id: {logprob, rank, decoded_token}}` per
 * prompt position, the first null).
 *
 * Every position has vLLM's logprob dict: the position's own token first, then the top-N
 * alternatives without it. Completions list the first N + 1 entries (so `logprobs: 0` gives
 * the token alone), chat the first N. Logprobs are clamped at -9999 as vLLM does, so JSON
 * never carries -Infinity.
 */
import type { PositionLogprobs, RequestOutputDelta, TokenizerLike } from '../engine/api.ts';

export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[];
  text_offset: number[];
}

export interface ChatLogprobEntry {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: Array<{ token: string; logprob: number; bytes: number[] }>;
}

/** One position's logprob dict in vLLM's order: the position's token first. */
export type LogprobEntries = ReadonlyArray<{ tokenId: number; logprob: number }>;

/** vLLM's rendering of a token under `return_tokens_as_token_ids`. */
export function tokenIdLabel(id: number): string {
  return `token_id:${id}`;
}

/** How a token is named in logprobs: its decoded text, or `token_id:{id}` when asked for ids. */
function tokenName(tokenizer: TokenizerLike, id: number, asTokenIds: boolean): string {
  return asTokenIds ? tokenIdLabel(id) : tokenizer.decode([id]);
}

function clamp(logprob: number): number {
  return Math.max(logprob, -9999);
}

/** Python's len(): code points, not UTF-16 units. */
export function pyLen(text: string): number {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

function bytesOf(text: string): number[] {
  return [...Buffer.from(text, 'utf8')];
}

function dict(tokenId: number, logprob: number, top: LogprobEntries): LogprobEntries {
  return [{ tokenId, logprob }, ...top.filter((t) => t.tokenId !== tokenId)];
}

/** The logprob dict of each token a delta adds. */
export function sampledEntries(delta: RequestOutputDelta): LogprobEntries[] {
  return delta.newTokenIds.map((id, i) => dict(id, delta.logprobs?.[i] ?? 0, delta.topLogprobs?.[i] ?? []));
}

/** The logprob dict of each prompt position (null for the first). */
export function promptEntries(
  promptLogprobs: readonly (PositionLogprobs | null)[],
): (LogprobEntries | null)[] {
  return promptLogprobs.map((p) => (p === null ? null : dict(p.tokenId, p.logprob, p.top)));
}

/**
 * vLLM's completion logprobs of `tokenIds`: offsets start at `initialOffset` and advance by
 * the length of each token as named (its text, or its `token_id:` label).
 */
export function completionLogprobs(
  tokenizer: TokenizerLike,
  tokenIds: readonly number[],
  entries: readonly (LogprobEntries | null)[],
  numTop: number,
  initialOffset: number,
  asTokenIds: boolean,
): CompletionLogprobs {
  const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  let offset = initialOffset;
  for (const [i, id] of tokenIds.entries()) {
    const token = tokenName(tokenizer, id, asTokenIds);
    const position = entries[i] ?? null;
    out.tokens.push(token);
    if (position === null) {
      out.token_logprobs.push(null);
      out.top_logprobs.push(null);
    } else {
      out.token_logprobs.push(clamp(position[0]?.logprob ?? 0));
      const top: Record<string, number> = {};
      // Distinct ids can share a text (partial UTF-8): as a Python dict, the later one wins.
      for (const t of position.slice(0, numTop + 1))
        top[tokenName(tokenizer, t.tokenId, asTokenIds)] = clamp(t.logprob);
      out.top_logprobs.push(top);
    }
    out.text_offset.push(offset);
    offset += pyLen(token);
  }
  return out;
}

export function chatLogprobs(
  tokenizer: TokenizerLike,
  tokenIds: readonly number[],
  entries: readonly LogprobEntries[],
  numTop: number,
  asTokenIds: boolean,
): ChatLogprobEntry[] {
  return tokenIds.map((id, i) => {
    const token = tokenName(tokenizer, id, asTokenIds);
    const position = entries[i] ?? [];
    return {
      token,
      logprob: clamp(position[0]?.logprob ?? 0),
      bytes: bytesOf(token),
      top_logprobs: position.slice(0, numTop).map((t) => {
        const text = tokenName(tokenizer, t.tokenId, asTokenIds);
        return { token: text, logprob: clamp(t.logprob), bytes: bytesOf(text) };
      }),
    };
  });
}

/**
 * vLLM's tokens endpoint logprobs: chat-shaped content, tokens named `token_id:{id}`, no
 * bytes, and at least the sampled token's own entry in top_logprobs.
 */
export function tokensLogprobs(
  tokenIds: readonly number[],
  entries: readonly LogprobEntries[],
  numTop: number,
): { content: Array<Record<string, unknown>> } {
  return {
    content: tokenIds.map((id, i) => {
      const position = entries[i] ?? [];
      return {
        token: tokenIdLabel(id),
        logprob: clamp(position[0]?.logprob ?? -9999),
        bytes: null,
        top_logprobs: position.slice(0, Math.max(numTop, 1)).map((t) => ({
          token: tokenIdLabel(t.tokenId),
          logprob: clamp(t.logprob),
          bytes: null,
        })),
      };
    }),
  };
}

export interface WireLogprob {
  logprob: number;
  rank: number;
  decoded_token: string;
}

/** vLLM's `prompt_logprobs` field: per position `{token id: {logprob, rank, decoded_token}}`. */
export function promptLogprobsJson(
  tokenizer: TokenizerLike,
  promptLogprobs: readonly (PositionLogprobs | null)[],
): (Record<string, WireLogprob> | null)[] {
  return promptLogprobs.map((p) => {
    if (p === null) return null;
    const out: Record<string, WireLogprob> = {
      [p.tokenId]: { logprob: clamp(p.logprob), rank: p.rank, decoded_token: tokenizer.decode([p.tokenId]) },
    };
    p.top.forEach((t, i) => {
      if (t.tokenId !== p.tokenId)
        out[t.tokenId] = {
          logprob: clamp(t.logprob),
          rank: i + 1,
          decoded_token: tokenizer.decode([t.tokenId]),
        };
    });
    return out;
  });
}
