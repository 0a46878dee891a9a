/**
 * vLLM's per-request logits processing before sampling (vllm/v1/sample): allowed_token_ids,
 * bad_words, min_tokens, logit_bias, then the repetition / frequency / presence penalties.
 * Logprobs stay those of the raw distribution (vLLM's default `raw_logprobs`): the runner
 * hands the sampler the processed row for the choice and the raw row for the logprobs.
 */
import type { SamplingParams } from '../api.ts';

export interface LogitsContext {
  promptTokenIds: readonly number[];
  outputTokenIds: readonly number[];
}

/** True when the request asks for any processing (most requests do not: no copy then). */
export function needsLogitsProcessing(p: SamplingParams): boolean {
  return (
    (p.allowedTokenIds?.length ?? 0) > 0 ||
    (p.badWordsTokenIds?.length ?? 0) > 0 ||
    (p.minTokens ?? 0) > 0 ||
    Object.keys(p.logitBias ?? {}).length > 0 ||
    (p.repetitionPenalty ?? 1) !== 1 ||
    (p.frequencyPenalty ?? 0) !== 0 ||
    (p.presencePenalty ?? 0) !== 0
  );
}

/** A processed copy of one row of logits (the raw row is left as it is). */
export function processLogits(raw: Float32Array, p: SamplingParams, ctx: LogitsContext): Float32Array {
  const logits = Float32Array.from(raw);
  // vLLM's float32 steps (a bias in float32, a scale of 1 / r, then two subtractions), so that
  // the processed logits are vLLM's to the bit.
  const f = Math.fround;
  const out = ctx.outputTokenIds;
  if (p.allowedTokenIds && p.allowedTokenIds.length > 0) {
    const allowed = new Set(p.allowedTokenIds);
    for (let i = 0; i < logits.length; i++) if (!allowed.has(i)) logits[i] = Number.NEGATIVE_INFINITY;
  }
  for (const word of p.badWordsTokenIds ?? []) {
    const last = word[word.length - 1];
    if (last === undefined) continue;
    const prefix = word.slice(0, -1);
    const tail = out.slice(out.length - prefix.length);
    if (prefix.length <= out.length && prefix.every((t, i) => tail[i] === t))
      logits[last] = Number.NEGATIVE_INFINITY;
  }
  if ((p.minTokens ?? 0) > out.length) {
    const stops = [...p.stopTokenIds, ...(p.ignoreEos || p.eosTokenId == null ? [] : [p.eosTokenId])];
    for (const id of stops) if (id >= 0 && id < logits.length) logits[id] = Number.NEGATIVE_INFINITY;
  }
  for (const [id, bias] of Object.entries(p.logitBias ?? {})) {
    const i = Number(id);
    if (i >= 0 && i < logits.length)
      logits[i] = (logits[i] as number) + f(Math.min(100, Math.max(-100, bias)));
  }
  const rep = f(p.repetitionPenalty ?? 1);
  if (rep !== 1) {
    const inverse = f(1 / rep);
    const seen = new Set([...ctx.promptTokenIds, ...out]);
    for (const id of seen) {
      const v = logits[id];
      if (v !== undefined) logits[id] = v * (v > 0 ? inverse : rep);
    }
  }
  const freq = p.frequencyPenalty ?? 0;
  const presence = p.presencePenalty ?? 0;
  if (freq !== 0 || presence !== 0) {
    const counts = new Map<number, number>();
    for (const id of out) counts.set(id, (counts.get(id) ?? 0) + 1);
    for (const [id, n] of counts) {
      const v = logits[id];
      if (v !== undefined) logits[id] = f(v - f(f(freq) * n)) - f(presence);
    }
  }
  return logits;
}
