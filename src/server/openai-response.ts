/**
 * Builds OpenAI wire objects (completion / chat completion, full and chunked) from engine
 * deltas. One ChoiceState per choice accumulates what a non-streaming response returns.
 */
import type { KVTransferParams } from '../connector/types.ts';
import type { FinishReason, PositionLogprobs, RequestOutputDelta, TokenizerLike } from '../engine/api.ts';
import {
  chatLogprobs,
  completionLogprobs,
  type LogprobEntries,
  promptEntries,
  promptLogprobsJson,
  pyLen,
  sampledEntries,
  tokensLogprobs,
} from './logprobs-format.ts';
import type { GenerationPlan } from './parse-request.ts';

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** With --enable-prompt-tokens-details: prompt tokens not computed (vLLM's num_cached_tokens). */
  prompt_tokens_details?: { cached_tokens: number };
}

/** One streamed increment of a choice. */
export interface ChoicePart {
  text: string;
  logprobs: unknown;
  /** The token ids of this increment (return_token_ids). */
  tokenIds: number[];
  /** On the choice's first increment with return_token_ids: the prompt's ids. */
  promptTokenIds: number[] | null;
}

export class ChoiceState {
  readonly index: number;
  /** Generated text (without any echo). */
  text = '';
  numTokens = 0;
  /** Generated token ids and their logprob dicts (with logprobs requested). */
  tokenIds: number[] = [];
  entries: LogprobEntries[] = [];
  /** The prompt's logprobs, when the engine computed them. */
  promptLogprobs: (PositionLogprobs | null)[] | null = null;
  /** Code points already streamed (echoed prompt included): the next chunk's first text_offset. */
  streamedLength = 0;
  echoed = false;
  /** Prompt tokens the engine did not compute (prefix cache or connector). */
  cachedTokens = 0;
  finishReason: FinishReason | null = null;
  stopReason: string | number | null = null;
  kvTransferParams: KVTransferParams | null = null;

  constructor(index: number) {
    this.index = index;
  }
}

export interface ResponseContext {
  plan: GenerationPlan;
  id: string;
  created: number;
  model: string;
  tokenizer: TokenizerLike;
}

function wantsLogprobs(ctx: ResponseContext): boolean {
  return ctx.plan.logprobs !== null;
}

/** What a choice shows of its prompt: nothing, or (echo) the prompt's text, ids and logprob dicts. */
function echoOf(
  ctx: ResponseContext,
  choice: ChoiceState,
): { text: string; tokenIds: number[]; entries: (LogprobEntries | null)[] } {
  const plan = ctx.plan;
  if (!plan.echo) return { text: '', tokenIds: [], entries: [] };
  // vLLM: with return_token_ids the echoed text is left out (the ids carry the prompt).
  const p = Math.floor(choice.index / plan.n);
  const tokenIds = plan.prompts[p] ?? [];
  const entries = choice.promptLogprobs ? promptEntries(choice.promptLogprobs) : tokenIds.map(() => null);
  return { text: plan.returnTokenIds ? '' : (plan.promptTexts[p] ?? ''), tokenIds, entries };
}

/**
 * Accumulates one delta into its choice: all a full response needs. Returns the logprob
 * dicts of the delta's tokens (empty without logprobs).
 */
export function recordDelta(
  ctx: ResponseContext,
  choice: ChoiceState,
  delta: RequestOutputDelta,
): LogprobEntries[] {
  if (delta.promptLogprobs) choice.promptLogprobs = delta.promptLogprobs;
  choice.cachedTokens = delta.metrics.numCachedTokens;
  const entries = wantsLogprobs(ctx) ? sampledEntries(delta) : [];
  choice.text += delta.newText;
  choice.numTokens += delta.newTokenIds.length;
  choice.tokenIds.push(...delta.newTokenIds);
  choice.entries.push(...entries);
  if (delta.finished) {
    choice.finishReason = delta.finishReason;
    choice.stopReason = delta.stopReason ?? null;
    choice.kvTransferParams = delta.kvTransferParams;
  }
  return entries;
}

/** Records one delta (recordDelta) and returns the wire fields of this increment, for streams. */
export function applyDelta(ctx: ResponseContext, choice: ChoiceState, delta: RequestOutputDelta): ChoicePart {
  const plan = ctx.plan;
  const firstPart = choice.numTokens === 0 && !choice.echoed;
  const entries = recordDelta(ctx, choice, delta);
  // vLLM streams the echoed prompt with the first output; with max_tokens 0, the prompt alone.
  let text = plan.echoOnly ? '' : delta.newText;
  let tokenIds = plan.echoOnly ? [] : delta.newTokenIds;
  let allEntries: (LogprobEntries | null)[] = plan.echoOnly ? [] : entries;
  if (plan.echo && !choice.echoed && (delta.newTokenIds.length > 0 || delta.finished)) {
    const echo = echoOf(ctx, choice);
    text = echo.text + text;
    tokenIds = [...echo.tokenIds, ...tokenIds];
    allEntries = [...echo.entries, ...allEntries];
    choice.echoed = true;
  }
  let logprobs: unknown = null;
  if (wantsLogprobs(ctx)) {
    const asIds = plan.returnTokensAsTokenIds;
    logprobs =
      plan.kind === 'tokens'
        ? tokensLogprobs(tokenIds, entries, plan.logprobs ?? 0)
        : plan.kind === 'completion'
          ? completionLogprobs(
              ctx.tokenizer,
              tokenIds,
              allEntries,
              plan.logprobs ?? 0,
              choice.streamedLength,
              asIds,
            )
          : { content: chatLogprobs(ctx.tokenizer, tokenIds, entries, plan.logprobs ?? 0, asIds) };
  }
  choice.streamedLength += pyLen(text);
  const promptIndex = Math.floor(choice.index / plan.n);
  return {
    text,
    logprobs,
    tokenIds: delta.newTokenIds,
    promptTokenIds: plan.returnTokenIds && firstPart ? (plan.prompts[promptIndex] ?? []) : null,
  };
}

function wireFinishReason(reason: FinishReason | null): string | null {
  return reason === 'error' ? 'abort' : reason;
}

export function usageOf(ctx: ResponseContext, choices: readonly ChoiceState[]): Usage {
  const promptTokens = promptTokenCount(ctx.plan);
  const completion = choices.reduce((sum, c) => sum + c.numTokens, 0);
  const usage: Usage = {
    prompt_tokens: promptTokens,
    completion_tokens: completion,
    total_tokens: promptTokens + completion,
  };
  if (ctx.plan.promptTokensDetails)
    usage.prompt_tokens_details = { cached_tokens: choices[choices.length - 1]?.cachedTokens ?? 0 };
  return usage;
}

/** stream_options.continuous_usage_stats: one choice's usage so far, on each of its chunks. */
function choiceUsage(ctx: ResponseContext, choice: ChoiceState): Usage {
  const prompt = ctx.plan.prompts[Math.floor(choice.index / ctx.plan.n)]?.length ?? 0;
  return {
    prompt_tokens: prompt,
    completion_tokens: choice.numTokens,
    total_tokens: prompt + choice.numTokens,
  };
}

export function promptTokenCount(plan: GenerationPlan): number {
  return plan.prompts.reduce((sum, p) => sum + p.length, 0);
}

/** The whole (non-streaming) response body. */
export function fullResponse(ctx: ResponseContext, choices: readonly ChoiceState[]): unknown {
  const kvTransferParams = choices.find((c) => c.kvTransferParams !== null)?.kvTransferParams ?? null;
  const usage = usageOf(ctx, choices);
  const ids = ctx.plan.returnTokenIds;
  const head = { id: ctx.id, created: ctx.created, model: ctx.model };
  if (ctx.plan.kind === 'tokens') {
    return {
      request_id: ctx.id,
      model: ctx.model,
      created: ctx.created,
      choices: choices.map((c) => ({
        index: c.index,
        logprobs: wantsLogprobs(ctx) ? tokensLogprobs(c.tokenIds, c.entries, ctx.plan.logprobs ?? 0) : null,
        finish_reason: wireFinishReason(c.finishReason) ?? 'stop',
        token_ids: c.tokenIds,
        routed_experts: null,
      })),
      usage,
      prompt_logprobs: choices[0]?.promptLogprobs
        ? promptLogprobsJson(ctx.tokenizer, choices[0].promptLogprobs)
        : null,
      kv_transfer_params: kvTransferParams,
    };
  }
  if (ctx.plan.kind === 'completion') {
    return {
      ...head,
      object: 'text_completion',
      choices: choices.map((c) => {
        const echo = echoOf(ctx, c);
        const tokenIds = ctx.plan.echoOnly ? echo.tokenIds : [...echo.tokenIds, ...c.tokenIds];
        const entries = ctx.plan.echoOnly ? echo.entries : [...echo.entries, ...c.entries];
        return {
          index: c.index,
          text: ctx.plan.echoOnly ? echo.text : echo.text + c.text,
          logprobs: wantsLogprobs(ctx)
            ? completionLogprobs(
                ctx.tokenizer,
                tokenIds,
                entries,
                ctx.plan.logprobs ?? 0,
                0,
                ctx.plan.returnTokensAsTokenIds,
              )
            : null,
          finish_reason: wireFinishReason(c.finishReason),
          stop_reason: c.stopReason,
          prompt_logprobs: c.promptLogprobs ? promptLogprobsJson(ctx.tokenizer, c.promptLogprobs) : null,
          ...(ids
            ? {
                prompt_token_ids: ctx.plan.prompts[Math.floor(c.index / ctx.plan.n)] ?? [],
                token_ids: c.tokenIds,
              }
            : {}),
        };
      }),
      usage,
      kv_transfer_params: kvTransferParams,
    };
  }
  return {
    ...head,
    object: 'chat.completion',
    choices: choices.map((c) => ({
      index: c.index,
      message: {
        role: ctx.plan.responseRole,
        content: (ctx.plan.chatEchoText ?? '') + c.text,
        refusal: null,
        tool_calls: [],
      },
      logprobs: wantsLogprobs(ctx)
        ? {
            content: chatLogprobs(
              ctx.tokenizer,
              c.tokenIds,
              c.entries,
              ctx.plan.logprobs ?? 0,
              ctx.plan.returnTokensAsTokenIds,
            ),
          }
        : null,
      finish_reason: wireFinishReason(c.finishReason),
      stop_reason: c.stopReason,
      ...(ids ? { token_ids: c.tokenIds } : {}),
    })),
    usage,
    ...(ids ? { prompt_token_ids: ctx.plan.prompts[0] ?? [] } : {}),
    prompt_logprobs: choices[0]?.promptLogprobs
      ? promptLogprobsJson(ctx.tokenizer, choices[0].promptLogprobs)
      : null,
    kv_transfer_params: kvTransferParams,
  };
}

/** One streamed chunk for one choice's increment (`finished`: the choice's last). */
export function chunkOf(
  ctx: ResponseContext,
  choice: ChoiceState,
  part: ChoicePart,
  finished: boolean,
): Record<string, unknown> {
  const finish = finished ? wireFinishReason(choice.finishReason) : null;
  const stopReason = finished ? choice.stopReason : null;
  const index = choice.index;
  if (ctx.plan.kind === 'tokens') {
    const chunk: Record<string, unknown> = {
      request_id: ctx.id,
      choices: [
        {
          index,
          logprobs: part.logprobs,
          finish_reason: finish,
          token_ids: part.tokenIds,
          routed_experts: null,
        },
      ],
    };
    if (ctx.plan.continuousUsage) chunk['usage'] = choiceUsage(ctx, choice);
    if (finished && choice.kvTransferParams !== null) chunk['kv_transfer_params'] = choice.kvTransferParams;
    return chunk;
  }
  const ids = ctx.plan.returnTokenIds;
  const wire: Record<string, unknown> =
    ctx.plan.kind === 'completion'
      ? { index, text: part.text, logprobs: part.logprobs, finish_reason: finish, stop_reason: stopReason }
      : {
          index,
          delta: part.text === '' && finish !== null ? {} : { content: part.text },
          logprobs: part.logprobs,
          finish_reason: finish,
          stop_reason: stopReason,
        };
  if (ids) {
    // As vLLM: a completion choice's first chunk carries its prompt's ids, later ones null.
    if (ctx.plan.kind === 'completion') wire['prompt_token_ids'] = part.promptTokenIds ?? null;
    wire['token_ids'] = part.tokenIds;
  }
  const chunk: Record<string, unknown> = {
    id: ctx.id,
    object: ctx.plan.kind === 'completion' ? 'text_completion' : 'chat.completion.chunk',
    created: ctx.created,
    model: ctx.model,
    choices: [wire],
  };
  if (ctx.plan.continuousUsage) chunk['usage'] = choiceUsage(ctx, choice);
  if (finished && choice.kvTransferParams !== null) chunk['kv_transfer_params'] = choice.kvTransferParams;
  return chunk;
}

/** Chat echo in a stream: the last message's content, right after the role chunk (as vLLM). */
export function echoChunk(ctx: ResponseContext, index: number, text: string): Record<string, unknown> {
  return {
    id: ctx.id,
    object: 'chat.completion.chunk',
    created: ctx.created,
    model: ctx.model,
    choices: [{ index, delta: { content: text }, logprobs: null, finish_reason: null }],
  };
}

/** Chat streams open each choice with the answer's role (and, as vLLM, the prompt's ids under `return_token_ids`). */
export function roleChunk(ctx: ResponseContext, index: number): Record<string, unknown> {
  return {
    id: ctx.id,
    object: 'chat.completion.chunk',
    created: ctx.created,
    model: ctx.model,
    choices: [
      { index, delta: { role: ctx.plan.responseRole, content: '' }, logprobs: null, finish_reason: null },
    ],
    ...(ctx.plan.returnTokenIds ? { prompt_token_ids: ctx.plan.prompts[0] ?? [] } : {}),
  };
}

export function usageChunk(ctx: ResponseContext, usage: Usage): Record<string, unknown> {
  if (ctx.plan.kind === 'tokens') return { request_id: ctx.id, choices: [], usage };
  return {
    id: ctx.id,
    object: ctx.plan.kind === 'completion' ? 'text_completion' : 'chat.completion.chunk',
    created: ctx.created,
    model: ctx.model,
    choices: [],
    usage,
  };
}
