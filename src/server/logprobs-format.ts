/** OpenAI's two logprobs shapes: legacy completions (parallel arrays) and chat (content list). */
import type { RequestOutputDelta, TokenizerLike } from '../engine/api.ts';

export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Array<Record<string, number>>;
  text_offset: number[];
}

export interface ChatLogprobEntry {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: Array<{ token: string; logprob: number; bytes: number[] }>;
}

function tokenText(tokenizer: TokenizerLike, id: number): string {
  return tokenizer.decode([id]);
}

/** vLLM's rendering of a token under `return_tokens_as_token_ids`. */
export function tokenIdLabel(id: number): string {
  return `token_id:${id}`;
}

/** How a token is named in logprobs: its decoded text, or `token_id:{id}` when asked for ids. */
function tokenName(tokenizer: TokenizerLike, id: number, asTokenIds: boolean): string {
  return asTokenIds ? tokenIdLabel(id) : tokenText(tokenizer, id);
}

function bytesOf(text: string): number[] {
  return [...Buffer.from(text, 'utf8')];
}

/** `text_offset` always indexes the generated text, also when tokens are named by id. */
export function completionLogprobs(
  tokenizer: TokenizerLike,
  delta: RequestOutputDelta,
  startOffset: number,
  asTokenIds = false,
): CompletionLogprobs {
  const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  let offset = startOffset;
  for (const [i, id] of delta.newTokenIds.entries()) {
    const text = tokenText(tokenizer, id);
    out.tokens.push(asTokenIds ? tokenIdLabel(id) : text);
    out.token_logprobs.push(delta.logprobs?.[i] ?? 0);
    const top: Record<string, number> = Object.create(null) as Record<string, number>;
    for (const t of delta.topLogprobs?.[i] ?? []) {
      // Distinct ids can decode to the same text (partial UTF-8): keep the most likely.
      const key = tokenName(tokenizer, t.tokenId, asTokenIds);
      if (!(key in top) || (top[key] ?? -Infinity) < t.logprob) top[key] = t.logprob;
    }
    out.top_logprobs.push(top);
    out.text_offset.push(offset);
    offset += text.length;
  }
  return out;
}

export function chatLogprobs(
  tokenizer: TokenizerLike,
  delta: RequestOutputDelta,
  topN: number,
  asTokenIds = false,
): ChatLogprobEntry[] {
  return delta.newTokenIds.map((id, i) => {
    const token = tokenName(tokenizer, id, asTokenIds);
    return {
      token,
      logprob: delta.logprobs?.[i] ?? 0,
      bytes: bytesOf(token),
      top_logprobs: (delta.topLogprobs?.[i] ?? []).slice(0, topN).map((t) => {
        const text = tokenName(tokenizer, t.tokenId, asTokenIds);
        return { token: text, logprob: t.logprob, bytes: bytesOf(text) };
      }),
    };
  });
}

export function appendCompletionLogprobs(into: CompletionLogprobs, more: CompletionLogprobs): void {
  into.tokens.push(...more.tokens);
  into.token_logprobs.push(...more.token_logprobs);
  into.top_logprobs.push(...more.top_logprobs);
  into.text_offset.push(...more.text_offset);
}
