/**
 * The sampling fields vLLM applies beyond OpenAI's basics (vllm/sampling_params.py and the
 * request models of vllm/entrypoints/openai/): min_tokens, logit_bias, the three penalties,
 * allowed_token_ids and bad_words, checked with vLLM's ranges and messages.
 */
import type { SamplingParams, TokenizerLike } from '../engine/api.ts';
import { type Body, badRequest, invalid, optNumber, optStringList, optTokenIds } from './fields.ts';

export type SamplingExtras = Pick<
  SamplingParams,
  | 'minTokens'
  | 'logitBias'
  | 'presencePenalty'
  | 'frequencyPenalty'
  | 'repetitionPenalty'
  | 'allowedTokenIds'
  | 'badWordsTokenIds'
>;

export function readSamplingExtras(
  body: Body,
  tokenizer: TokenizerLike,
  maxTokens: number | null,
): SamplingExtras {
  const vocab = tokenizer.vocabSize;
  const minTokens = optNumber(body, 'min_tokens', { integer: true, min: 0 }) ?? 0;
  if (maxTokens !== null && minTokens > maxTokens)
    throw badRequest(
      `min_tokens must be less than or equal to max_tokens=${maxTokens}, got ${minTokens}.`,
      'min_tokens',
      'Lower min_tokens or raise max_tokens.',
    );
  const presencePenalty = optNumber(body, 'presence_penalty', { min: -2, max: 2 }) ?? 0;
  const frequencyPenalty = optNumber(body, 'frequency_penalty', { min: -2, max: 2 }) ?? 0;
  const repetitionPenalty = optNumber(body, 'repetition_penalty', { above: 0 }) ?? 1;
  const out: SamplingExtras = { minTokens, presencePenalty, frequencyPenalty, repetitionPenalty };
  const bias = readLogitBias(body, vocab);
  if (bias) out.logitBias = bias;
  if (body['allowed_token_ids'] !== undefined && body['allowed_token_ids'] !== null) {
    const allowed = optTokenIds(body, 'allowed_token_ids', vocab);
    if (allowed.length === 0)
      throw badRequest(
        'allowed_token_ids is not None and empty!',
        'allowed_token_ids',
        'Send at least one token id, or leave the field out.',
      );
    out.allowedTokenIds = allowed;
  }
  const badWords = optStringList(body, 'bad_words');
  if (badWords.length > 0) out.badWordsTokenIds = badWordsTokenIds(badWords, tokenizer);
  return out;
}

/** `{"<token id>": bias}` with ids in the vocabulary (vLLM rejects the others). */
function readLogitBias(body: Body, vocab: number): Record<number, number> | null {
  const v = body['logit_bias'];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'object' || Array.isArray(v))
    throw invalid('logit_bias', 'an object of token id → bias', v);
  const out: Record<number, number> = {};
  const outside: string[] = [];
  for (const [key, bias] of Object.entries(v as Body)) {
    const id = Number(key);
    const value = typeof bias === 'string' && bias.trim() !== '' ? Number(bias) : bias;
    if (!/^\s*-?\d+\s*$/.test(key) || typeof value !== 'number' || !Number.isFinite(value))
      throw invalid('logit_bias', 'an object of integer token ids (as strings) to numbers', v);
    if (id < 0 || id >= vocab) outside.push(key);
    else out[id] = value;
  }
  if (outside.length > 0)
    throw badRequest(
      `token_id(s) [${outside.join(', ')}] in logit_bias contain out-of-vocab token ids. Vocabulary size: ${vocab}`,
      'logit_bias',
      `Use token ids in [0, ${vocab}).`,
    );
  return out;
}

/**
 * vLLM's tokenization of bad_words: each word as it is (leading spaces stripped) and with
 * one leading space, the second only when it makes a different token sequence of the same
 * length (the word after a space).
 */
export function badWordsTokenIds(words: readonly string[], tokenizer: TokenizerLike): number[][] {
  const out: number[][] = [];
  for (const word of words) {
    const plain = tokenizer.encode(word.trimStart(), { addSpecialTokens: false });
    if (plain.length === 0) continue;
    out.push(plain);
    const spaced = tokenizer.encode(` ${word.trimStart()}`, { addSpecialTokens: false });
    if (spaced.length === plain.length && spaced[0] !== plain[0]) out.push(spaced);
  }
  return out;
}
