/**
 * Builds OpenAI wire objects (completion / chat completion, full and chunked) from engine
 * deltas. One ChoiceState per choice accumulates what a non-streaming response returns.
 */
import type { KVTransferParams } from '../connector/types.ts';
import type { FinishReason, RequestOutputDelta, TokenizerLike } from '../engine/api.ts';
import {
  appendCompletionLogprobs,
  type ChatLogprobEntry,
  type CompletionLogprobs,
  chatLogprobs,
  completionLogprobs,
} from './logprobs-format.ts';
import type { GenerationPlan } from './parse-request.ts';

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export class ChoiceState {
  readonly index: number;
  text = '';
  numTokens = 0;
  /** Generated token ids, kept only under `return_token_ids`. */
  readonly tokenIds: number[] = [];
  finishReason: FinishReason | null = null;
  kvTransferParams: KVTransferParams | null = null;
  completionLp: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  chatLp: ChatLogprobEntry[] = [];

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
  return ctx.plan.sampling[0]?.logprobs !== null && ctx.plan.sampling[0]?.logprobs !== undefined;
}

/** Applies one delta to its choice; returns the wire fields of this increment. */
export function applyDelta(ctx: ResponseContext, choice: ChoiceState, delta: RequestOutputDelta): StreamPart {
  let logprobs: unknown = null;
  if (wantsLogprobs(ctx)) {
    if (ctx.plan.kind === 'completion') {
      const lp = completionLogprobs(
        ctx.tokenizer,
        delta,
        choice.text.length,
        ctx.plan.returnTokensAsTokenIds,
      );
      appendCompletionLogprobs(choice.completionLp, lp);
      logprobs = lp;
    } else {
      const lp = chatLogprobs(
        ctx.tokenizer,
        delta,
        ctx.plan.sampling[0]?.logprobs ?? 0,
        ctx.plan.returnTokensAsTokenIds,
      );
      choice.chatLp.push(...lp);
      logprobs = { content: lp };
    }
  }
  choice.text += delta.newText;
  choice.numTokens += delta.newTokenIds.length;
  if (ctx.plan.returnTokenIds) choice.tokenIds.push(...delta.newTokenIds);
  if (delta.finished) {
    choice.finishReason = delta.finishReason;
    choice.kvTransferParams = delta.kvTransferParams;
  }
  return {
    text: delta.newText,
    logprobs,
    ...(ctx.plan.returnTokenIds ? { tokenIds: [...delta.newTokenIds] } : {}),
  };
}

/** The wire fields of one increment of a choice. */
export interface StreamPart {
  text: string;
  logprobs: unknown;
  /** Under `return_token_ids`: the increment's token ids. */
  tokenIds?: number[];
  /** Under `return_token_ids`, completions: the prompt's ids on a choice's first chunk (null after). */
  promptTokenIds?: number[] | null;
}

function wireFinishReason(reason: FinishReason | null): string | null {
  return reason === 'error' ? 'abort' : reason;
}

export function usageOf(promptTokens: number, choices: readonly ChoiceState[]): Usage {
  const completion = choices.reduce((sum, c) => sum + c.numTokens, 0);
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completion,
    total_tokens: promptTokens + completion,
  };
}

export function promptTokenCount(plan: GenerationPlan): number {
  return plan.prompts.reduce((sum, p) => sum + p.length, 0);
}

/** The whole (non-streaming) response body. */
export function fullResponse(
  ctx: ResponseContext,
  choices: readonly ChoiceState[],
  echoText: string[],
): unknown {
  const kvTransferParams = choices.find((c) => c.kvTransferParams !== null)?.kvTransferParams ?? null;
  const usage = usageOf(promptTokenCount(ctx.plan), choices);
  const head = { id: ctx.id, created: ctx.created, model: ctx.model };
  if (ctx.plan.kind === 'completion') {
    return {
      ...head,
      object: 'text_completion',
      choices: choices.map((c) => ({
        index: c.index,
        text: (echoText[Math.floor(c.index / ctx.plan.n)] ?? '') + c.text,
        logprobs: wantsLogprobs(ctx) ? c.completionLp : null,
        finish_reason: wireFinishReason(c.finishReason),
        stop_reason: null,
        ...(ctx.plan.returnTokenIds
          ? { prompt_token_ids: ctx.plan.prompts[Math.floor(c.index / ctx.plan.n)], token_ids: c.tokenIds }
          : {}),
      })),
      usage,
      kv_transfer_params: kvTransferParams,
    };
  }
  return {
    ...head,
    object: 'chat.completion',
    choices: choices.map((c) => ({
      index: c.index,
      message: { role: 'assistant', content: c.text, refusal: null, tool_calls: [] },
      logprobs: wantsLogprobs(ctx) ? { content: c.chatLp } : null,
      finish_reason: wireFinishReason(c.finishReason),
      stop_reason: null,
      ...(ctx.plan.returnTokenIds ? { token_ids: c.tokenIds } : {}),
    })),
    usage,
    ...(ctx.plan.returnTokenIds ? { prompt_token_ids: ctx.plan.prompts[0] } : {}),
    kv_transfer_params: kvTransferParams,
  };
}

/** One streamed chunk for one choice's increment. */
export function chunkOf(
  ctx: ResponseContext,
  index: number,
  part: StreamPart,
  finishReason: FinishReason | null,
  kvTransferParams: KVTransferParams | null,
): Record<string, unknown> {
  const finish = wireFinishReason(finishReason);
  const choice =
    ctx.plan.kind === 'completion'
      ? {
          index,
          text: part.text,
          logprobs: part.logprobs,
          finish_reason: finish,
          stop_reason: null,
          ...(part.tokenIds
            ? { prompt_token_ids: part.promptTokenIds ?? null, token_ids: part.tokenIds }
            : {}),
        }
      : {
          index,
          delta: part.text === '' && finish !== null ? {} : { content: part.text },
          logprobs: part.logprobs,
          finish_reason: finish,
          stop_reason: null,
          ...(part.tokenIds ? { token_ids: part.tokenIds } : {}),
        };
  const chunk: Record<string, unknown> = {
    id: ctx.id,
    object: ctx.plan.kind === 'completion' ? 'text_completion' : 'chat.completion.chunk',
    created: ctx.created,
    model: ctx.model,
    choices: [choice],
  };
  if (kvTransferParams !== null) chunk['kv_transfer_params'] = kvTransferParams;
  return chunk;
}

/** Chat streams open each choice with the assistant role. */
export function roleChunk(ctx: ResponseContext, index: number): Record<string, unknown> {
  return {
    id: ctx.id,
    object: 'chat.completion.chunk',
    created: ctx.created,
    model: ctx.model,
    choices: [{ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }],
    // vLLM's return_token_ids: the prompt's ids ride on the first chunk of a chat stream.
    ...(ctx.plan.returnTokenIds ? { prompt_token_ids: ctx.plan.prompts[0] } : {}),
  };
}

export function usageChunk(ctx: ResponseContext, usage: Usage): Record<string, unknown> {
  return {
    id: ctx.id,
    object: ctx.plan.kind === 'completion' ? 'text_completion' : 'chat.completion.chunk',
    created: ctx.created,
    model: ctx.model,
    choices: [],
    usage,
  };
}
