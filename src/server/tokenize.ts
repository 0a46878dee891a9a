/**
 * POST /tokenize and POST /detokenize, as vLLM serves them (vllm/entrypoints/serve/
 * tokenize): a completion-style `prompt` or a chat-style `messages` body becomes the token
 * ids the generation endpoints would feed the model, and token ids become text. Both check
 * `model` and max_model_len like the generation endpoints; every bad field is a 400 naming it.
 */
import type { TokenizerLike } from '../engine/api.ts';
import { type ChatTemplatePolicy, readChatPromptOptions } from './chat-options.ts';
import { asBody, type Body, badRequest, invalid, isTokenIdArray, optBool, optString } from './fields.ts';
import { checkServedModel } from './model-card.ts';
import { readChatMessages } from './parse-request.ts';
import type { ServedModels } from './served-models.ts';

export interface TokenizeContext {
  tokenizer: TokenizerLike;
  servedModelName: string;
  models?: ServedModels;
  maxModelLen: number;
  chatTemplatePolicy?: ChatTemplatePolicy;
}

export interface TokenizeResponse {
  count: number;
  max_model_len: number;
  tokens: number[];
  token_strs: string[] | null;
}

export function tokenize(value: unknown, ctx: TokenizeContext): TokenizeResponse {
  const body = asBody(value);
  checkServedModel(optString(body, 'model'), ctx.servedModelName, ctx.models);
  const tokens =
    body['messages'] !== undefined
      ? chatTokens(body, ctx.tokenizer, ctx.chatTemplatePolicy)
      : promptTokens(body, ctx.tokenizer);
  checkLength(tokens.length, ctx.maxModelLen);
  const strs = optBool(body, 'return_token_strs') ?? false;
  return {
    count: tokens.length,
    max_model_len: ctx.maxModelLen,
    tokens,
    token_strs: strs ? tokens.map((id) => ctx.tokenizer.decode([id])) : null,
  };
}

export function detokenize(value: unknown, ctx: TokenizeContext): { prompt: string } {
  const body = asBody(value);
  checkServedModel(optString(body, 'model'), ctx.servedModelName, ctx.models);
  const tokens = body['tokens'];
  const vocab = ctx.tokenizer.vocabSize;
  if (!isTokenIdArray(tokens, vocab)) {
    throw invalid(
      'tokens',
      `an array of integer token ids in [0, ${vocab})`,
      tokens,
      'Send {"tokens": [1, 2, 3]}.',
    );
  }
  checkLength(tokens.length, ctx.maxModelLen);
  return { prompt: ctx.tokenizer.decode(tokens) };
}

/** TokenizeCompletionRequest: `prompt` is a string; add_special_tokens (default true) adds BOS. */
function promptTokens(body: Body, tokenizer: TokenizerLike): number[] {
  const prompt = body['prompt'];
  if (typeof prompt !== 'string') {
    throw invalid('prompt', 'a string (or send "messages" instead)', prompt, 'Send {"prompt": "your text"}.');
  }
  const ids = tokenizer.encode(prompt);
  return (optBool(body, 'add_special_tokens') ?? true) ? ids : withoutLeadingBos(ids, tokenizer);
}

/**
 * TokenizeChatRequest: the ids /v1/chat/completions would use for these messages;
 * add_special_tokens (default false) adds BOS on top, as vLLM does.
 */
function chatTokens(body: Body, tokenizer: TokenizerLike, policy: ChatTemplatePolicy | undefined): number[] {
  const messages = readChatMessages(body);
  const { render } = readChatPromptOptions(body, messages, policy);
  const ids = tokenizer.encodeChat(messages, render);
  const bos = tokenizer.bosTokenId;
  return (optBool(body, 'add_special_tokens') ?? false) && bos !== null ? [bos, ...ids] : ids;
}

function withoutLeadingBos(ids: number[], tokenizer: TokenizerLike): number[] {
  return ids.length > 0 && ids[0] === tokenizer.bosTokenId ? ids.slice(1) : ids;
}

function checkLength(count: number, maxModelLen: number): void {
  if (count <= maxModelLen) return;
  throw badRequest(
    `This model's maximum context length is ${maxModelLen} tokens. However, your request has ${count} input tokens. Please reduce the length of the input messages.`,
    'prompt',
    'Send fewer tokens, or start the server with a larger --max-model-len.',
    'SERVER_PROMPT_TOO_LONG',
  );
}

/** vLLM's TokenizerInfoResponse: the tokenizer's configuration, always with tokenizer_class. */
export function tokenizerInfo(tokenizer: TokenizerLike): Record<string, unknown> {
  return tokenizer.describe?.() ?? { tokenizer_class: tokenizer.constructor.name };
}
