/**
 * vLLM's beam search (`use_beam_search`), run in the serving layer as vLLM runs it: each
 * step asks the engine for one token of every live beam with the top 2·width logprobs,
 * extends each beam by each candidate (an EOS candidate completes the beam unless
 * ignore_eos), keeps the width best by score, and after max_tokens steps answers the width
 * best of the completed and live beams. A beam's score is its cumulative logprob over
 * (prompt + generated length, EOS not counted) ** length_penalty. Each step is a real engine
 * request, so the prefix cache serves the shared beam prefixes.
 *
 * Difference from vLLM: the step runs greedily, so the candidates are exactly the top
 * 2·width tokens; vLLM's step samples at the request's temperature and adds the sampled
 * token as one more candidate.
 */
import type { AsyncEngineLike, RequestOutputDelta, SamplingParams } from '../engine/api.ts';
import type { LoRARequest } from '../engine/lora/lora-request.ts';
import type { ChoiceEvent } from './generation.ts';
import { type LogprobEntries, sampledEntries } from './logprobs-format.ts';
import type { BeamSearchOptions, GenerationPlan } from './parse-request.ts';
import { internalRequestId } from './request-id.ts';

interface Beam {
  tokens: number[];
  cumLogprob: number;
  /** The logprob dict of each generated token. */
  entries: LogprobEntries[];
  finishReason: 'stop' | 'length';
  stopReason: number | null;
}

/** vLLM's get_beam_search_score. */
export function beamScore(
  allTokens: readonly number[],
  cumLogprob: number,
  eosTokenId: number,
  lengthPenalty: number,
): number {
  let length = allTokens.length;
  if (allTokens[allTokens.length - 1] === eosTokenId) length -= 1;
  return cumLogprob / Math.max(length, 1) ** lengthPenalty;
}

function stepSampling(logprobs: number): SamplingParams {
  return {
    maxTokens: 1,
    temperature: 0,
    topP: 1,
    topK: 0,
    seed: null,
    stop: [],
    stopTokenIds: [],
    ignoreEos: true,
    logprobs,
  };
}

interface StepContext {
  engine: AsyncEngineLike;
  prompt: readonly number[];
  cacheSalt: string | undefined;
  /** The adapter the request names as its model, or null. */
  lora: LoRARequest | null;
  logprobs: number;
  baseId: string;
  disableRandomization: boolean;
  signal: AbortSignal;
}

/** One engine step of one beam: its next-token logprob dict. */
async function stepOf(ctx: StepContext, beam: Beam, id: string): Promise<LogprobEntries> {
  let last: RequestOutputDelta | null = null;
  const request = {
    requestId: internalRequestId(id, ctx.disableRandomization),
    promptTokenIds: [...ctx.prompt, ...beam.tokens],
    sampling: stepSampling(ctx.logprobs),
    ...(ctx.cacheSalt === undefined ? {} : { cacheSalt: ctx.cacheSalt }),
    loraRequest: ctx.lora,
  };
  for await (const delta of ctx.engine.generate(request, ctx.signal)) {
    if (delta.finished && delta.finishReason === 'error')
      throw new Error(delta.error?.message ?? 'the engine failed a beam search step');
    if (delta.newTokenIds.length > 0) last = delta;
  }
  if (last === null) throw new Error('a beam search step produced no token');
  return sampledEntries(last)[0] ?? [];
}

async function searchPrompt(
  ctx: StepContext,
  sampling: SamplingParams,
  options: BeamSearchOptions,
  eos: number,
): Promise<Beam[]> {
  // Best first, each beam scored once (not per comparison: a score copies prompt and tokens).
  const best = (list: Beam[]): Beam[] =>
    list
      .map((beam) => ({
        beam,
        score: beamScore([...ctx.prompt, ...beam.tokens], beam.cumLogprob, eos, options.lengthPenalty),
      }))
      .sort((a, b) => b.score - a.score)
      .slice(0, options.width)
      .map((s) => s.beam);
  let beams: Beam[] = [{ tokens: [], cumLogprob: 0, entries: [], finishReason: 'length', stopReason: null }];
  const completed: Beam[] = [];
  for (let step = 0; step < sampling.maxTokens && beams.length > 0; step++) {
    const dicts = await Promise.all(beams.map((b, i) => stepOf(ctx, b, `${ctx.baseId}-step${step}-${i}`)));
    const next: Beam[] = [];
    for (const [i, beam] of beams.entries()) {
      const dict = dicts[i]!;
      for (const { tokenId, logprob } of dict) {
        const extended = {
          cumLogprob: beam.cumLogprob + logprob,
          entries: [...beam.entries, dict],
        };
        if (tokenId === eos && !sampling.ignoreEos) {
          completed.push({
            ...extended,
            tokens: options.includeStopStrInOutput ? [...beam.tokens, tokenId] : beam.tokens,
            finishReason: 'stop',
            stopReason: eos,
          });
        } else {
          next.push({
            ...extended,
            tokens: [...beam.tokens, tokenId],
            finishReason: 'length',
            stopReason: null,
          });
        }
      }
    }
    beams = best(next);
  }
  return best([...completed, ...beams]);
}

function beamDelta(
  requestId: string,
  beam: Beam,
  text: string,
  numPromptTokens: number,
  startedAt: number,
  withLogprobs: boolean,
): RequestOutputDelta {
  const elapsed = Date.now() - startedAt;
  // The logprob dict's first entry is the token taken; with include_stop_str_in_output the
  // EOS token's dict is the last one.
  const positions = beam.entries.slice(0, beam.tokens.length);
  return {
    requestId,
    newTokenIds: beam.tokens,
    newText: text,
    logprobs: withLogprobs
      ? positions.map((d, i) => d.find((e) => e.tokenId === beam.tokens[i])?.logprob ?? 0)
      : null,
    topLogprobs: withLogprobs ? positions.map((d, i) => d.filter((e) => e.tokenId !== beam.tokens[i])) : null,
    finished: true,
    finishReason: beam.finishReason,
    stopReason: beam.stopReason,
    kvTransferParams: null,
    metrics: {
      arrivalTime: startedAt,
      queuedMs: 0,
      scheduledAt: startedAt,
      numCachedTokens: 0,
      ttftMs: elapsed,
      e2eMs: elapsed,
      numPromptTokens,
      numLocalComputedTokens: numPromptTokens,
      numLocalCachedTokens: 0,
      numExternalTokens: 0,
      externalCacheHitSources: {},
      numGeneratedTokens: beam.tokens.length,
    },
  };
}

/** The plan's choices by beam search: one finished delta per beam, best first, per prompt. */
export async function* beamSearchChoices(
  engine: AsyncEngineLike,
  plan: GenerationPlan,
  options: BeamSearchOptions,
  baseId: string,
  disableRandomization: boolean,
  signal: AbortSignal,
  lora: LoRARequest | null = null,
): AsyncGenerator<ChoiceEvent> {
  const eos = engine.tokenizer.eosTokenId;
  const logprobs = Math.max(2 * options.width, plan.logprobs ?? 0);
  const perPrompt = await Promise.all(
    plan.prompts.map(async (prompt, p) => {
      const startedAt = Date.now();
      const ctx: StepContext = {
        engine,
        prompt,
        cacheSalt: plan.cacheSalt,
        lora,
        logprobs,
        baseId: `${baseId}-beam${p}`,
        disableRandomization,
        signal,
      };
      const best = await searchPrompt(ctx, plan.sampling[p]!, options, eos);
      return best.map((beam, i): ChoiceEvent => {
        const shown = beam.tokens[beam.tokens.length - 1] === eos ? beam.tokens.slice(0, -1) : beam.tokens;
        return {
          index: p * plan.n + i,
          promptIndex: p,
          delta: beamDelta(
            `${baseId}-${p * plan.n + i}`,
            beam,
            engine.tokenizer.decode(shown),
            prompt.length,
            startedAt,
            plan.logprobs !== null,
          ),
        };
      });
    }),
  );
  for (const events of perPrompt) yield* events;
}
