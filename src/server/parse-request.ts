/**
 * Turns an OpenAI completions / chat-completions body into a GenerationPlan: validated
 * sampling parameters and tokenized prompts, checked against max_model_len.
 */
import type { KVTransferParams } from '../connector/types.ts';
import type { SamplingParams, TokenizerLike } from '../engine/api.ts';
import { type ChatTemplatePolicy, DEFAULT_RESPONSE_ROLE, readChatPromptOptions } from './chat-options.ts';
import {
  type Body,
  badRequest,
  invalid,
  isTokenIdArray,
  optBool,
  optNumber,
  optObject,
  optStop,
  optString,
  optTokenIds,
} from './fields.ts';
import { parseKvTransferParams } from './kv-transfer-params.ts';
import { refuseUnsupported } from './refused-fields.ts';
import { readSamplingExtras } from './sampling-fields.ts';
import { readStructuredOutputs } from './structured-fields.ts';

export const MAX_LOGPROBS = 20;
export const MAX_N = 128;
const DEFAULT_COMPLETION_MAX_TOKENS = 16;

export interface GenerationPlan {
  /** `tokens`: POST /inference/v1/generate; `responses`: POST /v1/responses (run as a chat). */
  kind: 'completion' | 'chat' | 'tokens' | 'responses';
  model: string | undefined;
  /** Token ids of each prompt (completions may batch several). */
  prompts: number[][];
  n: number;
  stream: boolean;
  includeUsage: boolean;
  /** Sampling of choice 0 of each prompt; other choices differ only by seed. */
  sampling: SamplingParams[];
  kvTransferParams: KVTransferParams | null;
  cacheSalt: string | undefined;
  echo: boolean;
  /** What `echo` shows of each prompt: the prompt string as sent, or the decoded token ids ([] without echo). */
  promptTexts: string[];
  /** echo with max_tokens 0 (lm-eval's loglikelihood): the prompt alone, one token generated and not shown. */
  echoOnly: boolean;
  /** Completions: the top-N per token (`logprobs`); chat: `top_logprobs` when `logprobs` is true; else null. */
  logprobs: number | null;
  /** vLLM's return_token_ids: prompt_token_ids and token_ids in the choices. */
  returnTokenIds: boolean;
  /** stream_options.continuous_usage_stats: usage on every chunk. */
  continuousUsage: boolean;
  /** --enable-prompt-tokens-details: usage.prompt_tokens_details.cached_tokens. */
  promptTokensDetails: boolean;
  /** Chat echo: the last message's content when its role is the answer's (prepended to the answer). */
  chatEchoText: string | null;
  /** Chat: the role of the answer's message (--response-role, or the last message's role). */
  responseRole: string;
  /** vLLM's `return_tokens_as_token_ids`: logprobs name tokens `token_id:{id}` instead of their text. */
  returnTokensAsTokenIds: boolean;
  /** Responses API: the request fields its Response object repeats. */
  responses?: ResponsesEcho;
  /** use_beam_search: the choices are the n best beams (beam-search.ts). */
  beamSearch: BeamSearchOptions | null;
}

/** vLLM's max_logprobs: a beam search step asks for 2·width of them. */
export const MAX_BEAM_WIDTH = 10;

export interface BeamSearchOptions {
  /** The request's n. */
  width: number;
  lengthPenalty: number;
  /** include_stop_str_in_output: a beam ended by EOS keeps the EOS token. */
  includeStopStrInOutput: boolean;
}

/** use_beam_search with n as the width, length_penalty (default 1) and include_stop_str_in_output. */
function readBeamSearch(body: Body, n: number, promptLogprobs: number | null): BeamSearchOptions | null {
  if (optBool(body, 'use_beam_search') !== true) return null;
  if (n > MAX_BEAM_WIDTH)
    throw invalid(
      'n',
      `at most ${MAX_BEAM_WIDTH} with use_beam_search (each step asks for 2·n logprobs, at most 20)`,
      n,
    );
  for (const [field, present] of [
    ['kv_transfer_params', body['kv_transfer_params'] !== undefined && body['kv_transfer_params'] !== null],
    ['prompt_logprobs', promptLogprobs !== null],
  ] as const) {
    if (present)
      throw badRequest(
        `${field} cannot be combined with use_beam_search on this server.`,
        field,
        `Drop ${field}, or use_beam_search.`,
      );
  }
  return {
    width: n,
    lengthPenalty: optNumber(body, 'length_penalty') ?? 1,
    includeStopStrInOutput: optBool(body, 'include_stop_str_in_output') ?? false,
  };
}

/** The request fields a Responses API Response object repeats (responses-api.ts). */
export interface ResponsesEcho {
  id: string;
  instructions: string | null;
  metadata: unknown;
  parallelToolCalls: boolean;
  toolChoice: unknown;
  tools: unknown[];
  background: boolean;
  maxToolCalls: number | null;
  previousResponseId: null;
  reasoning: unknown;
  serviceTier: string;
  text: unknown;
  truncation: string;
  user: string | null;
  /** include has message.output_text.logprobs. */
  logprobs: boolean;
}

export interface ParseContext {
  tokenizer: TokenizerLike;
  maxModelLen: number;
  /** --enable-prompt-tokens-details */
  enablePromptTokensDetails?: boolean;
  /** --trust-request-chat-template, --response-role */
  chatTemplatePolicy?: ChatTemplatePolicy;
}

export function parseCompletionRequest(body: Body, ctx: ParseContext): GenerationPlan {
  refuseUnsupported(body, 'completion');
  const read = readPrompts(body, ctx.tokenizer);
  const prompts = read.prompts.map((p) => truncatePrompt(body, p, ctx.maxModelLen));
  const texts = read.texts.map((t, i) => (prompts[i]?.length === read.prompts[i]?.length ? t : null));
  const logprobs = optNumber(body, 'logprobs', { integer: true, min: 0, max: MAX_LOGPROBS }) ?? null;
  const echo = optBool(body, 'echo') ?? false;
  // vLLM: echo with max_tokens 0 returns the prompt alone (the engine still generates one token).
  const requested =
    optNumber(body, 'max_tokens', { integer: true, min: echo ? 0 : 1 }) ?? DEFAULT_COMPLETION_MAX_TOKENS;
  const echoOnly = echo && requested === 0;
  // vLLM: echo asks the engine for the prompt's logprobs with the same top-N.
  const promptLogprobs = readPromptLogprobs(body) ?? (echo ? logprobs : null);
  return buildPlan('completion', body, ctx, prompts, echoOnly ? 1 : requested, logprobs, {
    echo,
    echoOnly,
    // Only an echo shows the prompt's text: decoding a long prompt of token ids costs its admission.
    promptTexts: echo ? texts.map((t, i) => t ?? ctx.tokenizer.decode(prompts[i] ?? [])) : [],
    promptLogprobs,
    chatEchoText: null,
  });
}

/**
 * vLLM's GenerateRequest (POST /inference/v1/generate): `token_ids` and a `sampling_params`
 * object (vLLM's SamplingParams fields, read as the completion fields of the same names),
 * `kv_transfer_params` at the top level (or, as llm-d-inference-sim also accepts, under
 * `sampling_params.extra_args`), `stream`, `stream_options`, `cache_salt`, `model`. Without
 * max_tokens the request may fill the context (vLLM's server default); priority must be 0
 * (no priority scheduling). Logprobs name tokens `token_id:{id}`.
 */
export function parseTokensRequest(body: Body, ctx: ParseContext): GenerationPlan {
  const ids = body['token_ids'];
  const vocab = ctx.tokenizer.vocabSize;
  if (ids === undefined || ids === null)
    throw badRequest('Missing input token_ids', 'token_ids', 'Send "token_ids": [<prompt token ids>].');
  if (!isTokenIdArray(ids, vocab) || ids.length === 0)
    throw invalid('token_ids', `a non-empty array of integers in [0, ${vocab})`, ids);
  const sampling = optObject(body, 'sampling_params');
  if (sampling === undefined)
    throw badRequest(
      'Missing sampling_params field',
      'sampling_params',
      'Send "sampling_params": {"max_tokens": 16, "temperature": 0} (vLLM\'s SamplingParams fields).',
    );
  const priority = optNumber(body, 'priority', { integer: true }) ?? 0;
  if (priority !== 0)
    throw badRequest(
      `Got priority ${priority} but Priority scheduling is not enabled.`,
      'priority',
      'Leave priority out (or 0): kvconnect schedules first come, first served.',
    );
  const { extra_args: extraArgs, ...fields } = sampling;
  const extraParams =
    extraArgs !== null && typeof extraArgs === 'object'
      ? (extraArgs as Body)['kv_transfer_params']
      : undefined;
  const merged: Body = {
    ...fields,
    model: body['model'],
    stream: body['stream'],
    stream_options: body['stream_options'],
    cache_salt: body['cache_salt'],
    kv_transfer_params: body['kv_transfer_params'] ?? extraParams,
  };
  refuseUnsupported(merged, 'completion');
  const prompt = truncatePrompt(merged, ids, ctx.maxModelLen);
  const logprobs = optNumber(merged, 'logprobs', { integer: true, min: 0, max: MAX_LOGPROBS }) ?? null;
  const maxTokens = optNumber(merged, 'max_tokens', { integer: true, min: 1 }) ?? null;
  const plan = buildPlan('tokens', merged, ctx, [prompt], maxTokens, logprobs, {
    echo: false,
    echoOnly: false,
    promptTexts: [],
    promptLogprobs: readPromptLogprobs(merged),
    chatEchoText: null,
  });
  return { ...plan, returnTokenIds: true, returnTokensAsTokenIds: true };
}

/**
 * vLLM's truncate_prompt_tokens: keep the last N prompt tokens (-1: max_model_len); more
 * than max_model_len is a 400.
 */
function truncatePrompt(body: Body, prompt: number[], maxModelLen: number): number[] {
  const n = optNumber(body, 'truncate_prompt_tokens', { integer: true, min: -1 });
  if (n === undefined) return prompt;
  if (n > maxModelLen)
    throw badRequest(
      `truncate_prompt_tokens value (${n}) is greater than max_model_len (${maxModelLen}). Please, select a smaller truncation size.`,
      'truncate_prompt_tokens',
      `Use a value up to ${maxModelLen}, or -1 for max_model_len.`,
    );
  const keep = n === -1 ? maxModelLen : n;
  return prompt.length > keep ? prompt.slice(prompt.length - keep) : prompt;
}

/** vLLM's `prompt_logprobs`: top-N (0–20) per prompt position; not with stream (vLLM's 400). */
function readPromptLogprobs(body: Body): number | null {
  const n = optNumber(body, 'prompt_logprobs', { integer: true, min: 0, max: MAX_LOGPROBS }) ?? null;
  if (n !== null && n > 0 && body['stream'] === true)
    throw badRequest(
      '`prompt_logprobs` are not available when `stream=True`.',
      'prompt_logprobs',
      'Send the request without stream, or drop prompt_logprobs.',
    );
  return n;
}

export function parseChatRequest(body: Body, ctx: ParseContext): GenerationPlan {
  refuseUnsupported(body, 'chat');
  const messages = readChatMessages(body);
  const chat = readChatPromptOptions(body, messages, ctx.chatTemplatePolicy);
  const echo = optBool(body, 'echo') ?? false;
  const last = messages[messages.length - 1];
  // vLLM echoes the last message when its role is the answer's role.
  const chatEchoText = echo && last?.role === chat.responseRole ? last.content : null;
  const wantsLogprobs = optBool(body, 'logprobs') ?? false;
  const top = optNumber(body, 'top_logprobs', { integer: true, min: 0, max: MAX_LOGPROBS });
  if (top !== undefined && top > 0 && !wantsLogprobs) {
    throw badRequest(
      'when using `top_logprobs`, `logprobs` must be set to true.',
      'top_logprobs',
      'Add "logprobs": true.',
    );
  }
  const maxTokens =
    optNumber(body, 'max_completion_tokens', { integer: true, min: 1 }) ??
    optNumber(body, 'max_tokens', { integer: true, min: 1 }) ??
    null;
  return buildPlan(
    'chat',
    body,
    ctx,
    [truncatePrompt(body, ctx.tokenizer.encodeChat(messages, chat.render), ctx.maxModelLen)],
    maxTokens,
    wantsLogprobs ? (top ?? 0) : null,
    {
      echo: false,
      echoOnly: false,
      promptTexts: [],
      promptLogprobs: readPromptLogprobs(body),
      chatEchoText,
      responseRole: chat.responseRole,
    },
  );
}

interface PromptOptions {
  echo: boolean;
  echoOnly: boolean;
  promptTexts: string[];
  promptLogprobs: number | null;
  chatEchoText: string | null;
  responseRole?: string;
}

function buildPlan(
  kind: GenerationPlan['kind'],
  body: Body,
  ctx: ParseContext,
  prompts: number[][],
  requestedMaxTokens: number | null,
  logprobs: number | null,
  promptOptions: PromptOptions,
): GenerationPlan {
  const model = optString(body, 'model');
  const n = optNumber(body, 'n', { integer: true, min: 1, max: MAX_N }) ?? 1;
  const stream = optBool(body, 'stream') ?? false;
  const streamOptions = optObject(body, 'stream_options');
  const includeUsage =
    streamOptions === undefined ? false : (optBool(streamOptions, 'include_usage') ?? false);
  const continuousUsage =
    streamOptions === undefined ? false : (optBool(streamOptions, 'continuous_usage_stats') ?? false);
  const returnTokenIds = optBool(body, 'return_token_ids') ?? false;
  const extras = readSamplingExtras(body, ctx.tokenizer, requestedMaxTokens);
  const temperature = optNumber(body, 'temperature', { min: 0, max: 2 }) ?? 1;
  const topP = optNumber(body, 'top_p', { above: 0, max: 1 }) ?? 1;
  const topK = optNumber(body, 'top_k', { integer: true, min: -1 }) ?? 0;
  // vLLM: seed is an int64. JSON numbers above 2^53 are rounded, so 2^63 - 1 reads as 2^63.
  const seed = optNumber(body, 'seed', { integer: true, min: -(2 ** 63), max: 2 ** 63 - 1 }) ?? null;
  if (seed !== null && seed >= 2 ** 63)
    throw invalid('seed', 'an integer >= -9223372036854775808 and <= 9223372036854775807', seed);
  const stop = optStop(body);
  const stopTokenIds = optTokenIds(body, 'stop_token_ids', ctx.tokenizer.vocabSize);
  const ignoreEos = optBool(body, 'ignore_eos') ?? false;
  const cacheSalt = optString(body, 'cache_salt');
  const kvTransferParams = parseKvTransferParams(body['kv_transfer_params']);
  const returnTokensAsTokenIds = optBool(body, 'return_tokens_as_token_ids') ?? false;
  const structuredOutputs = readStructuredOutputs(body);
  const beamSearch = readBeamSearch(body, n, promptOptions.promptLogprobs);
  if (beamSearch && structuredOutputs)
    throw badRequest(
      'Beam search does not apply structured outputs on this server.',
      'use_beam_search',
      'Send the constrained request without use_beam_search.',
    );
  const sampling = prompts.map((prompt): SamplingParams => {
    const maxTokens = checkLength(prompt.length, requestedMaxTokens, ctx.maxModelLen);
    return {
      maxTokens,
      temperature,
      topP,
      topK: Math.max(topK, 0),
      seed,
      stop,
      stopTokenIds,
      ignoreEos,
      logprobs,
      promptLogprobs: promptOptions.promptLogprobs,
      ...extras,
      ...(structuredOutputs ? { structuredOutputs } : {}),
    };
  });
  return {
    kind,
    model,
    prompts,
    n,
    stream,
    includeUsage,
    sampling,
    kvTransferParams,
    cacheSalt,
    echo: promptOptions.echo,
    echoOnly: promptOptions.echoOnly,
    promptTexts: promptOptions.promptTexts,
    logprobs,
    returnTokenIds,
    continuousUsage,
    promptTokensDetails: ctx.enablePromptTokensDetails ?? false,
    chatEchoText: promptOptions.chatEchoText,
    responseRole: promptOptions.responseRole ?? DEFAULT_RESPONSE_ROLE,
    returnTokensAsTokenIds,
    beamSearch,
  };
}

/** vLLM's serving-layer length checks; returns the effective max_tokens. */
function checkLength(promptLen: number, maxTokens: number | null, maxModelLen: number): number {
  if (promptLen >= maxModelLen) {
    throw badRequest(
      `This model's maximum context length is ${maxModelLen} tokens. However, your request has ${promptLen} input tokens. Please reduce the length of the input messages.`,
      'prompt',
      'Shorten the prompt, or start the server with a larger --max-model-len.',
      'SERVER_PROMPT_TOO_LONG',
    );
  }
  if (maxTokens === null) return maxModelLen - promptLen;
  if (promptLen + maxTokens > maxModelLen) {
    throw badRequest(
      `'max_tokens' or 'max_completion_tokens' is too large: ${maxTokens}. This model's maximum context length is ${maxModelLen} tokens and your request has ${promptLen} input tokens (${maxTokens} > ${maxModelLen} - ${promptLen}).`,
      'max_tokens',
      'Lower max_tokens, shorten the prompt, or start the server with a larger --max-model-len.',
      'SERVER_PROMPT_TOO_LONG',
    );
  }
  return maxTokens;
}

/** Token ids of each prompt, and its text when it was sent as a string (null for token ids). */
function readPrompts(
  body: Body,
  tokenizer: TokenizerLike,
): { prompts: number[][]; texts: (string | null)[] } {
  const p = body['prompt'];
  const vocab = tokenizer.vocabSize;
  const expected = 'a string, an array of token ids, or an array of those';
  if (typeof p === 'string') return { prompts: [tokenizer.encode(p)], texts: [p] };
  if (Array.isArray(p) && p.length > 0) {
    if (p.every((t) => typeof t === 'number')) {
      if (!isTokenIdArray(p, vocab))
        throw invalid('prompt', `token ids that are integers in [0, ${vocab})`, p);
      return { prompts: [p], texts: [null] };
    }
    const prompts = p.map((item) => {
      if (typeof item === 'string') return tokenizer.encode(item);
      if (isTokenIdArray(item, vocab) && item.length > 0) return item;
      throw invalid('prompt', expected, item);
    });
    return { prompts, texts: p.map((item) => (typeof item === 'string' ? item : null)) };
  }
  throw invalid('prompt', expected, p, 'Send "prompt": "your text" (or a non-empty list of token ids).');
}

/** Chat `messages`: {role, content} objects whose content is a string or text parts. */
export function readChatMessages(body: Body): Array<{ role: string; content: string }> {
  const messages = body['messages'];
  if (!Array.isArray(messages) || messages.length === 0) {
    throw invalid('messages', 'a non-empty array of {role, content} objects', messages);
  }
  return messages.map((m, i) => {
    const field = `messages[${i}]`;
    if (typeof m !== 'object' || m === null || Array.isArray(m)) throw invalid(field, 'an object', m);
    const msg = m as Body;
    if (typeof msg['role'] !== 'string') throw invalid(`${field}.role`, 'a string', msg['role']);
    return { role: msg['role'], content: readContent(msg['content'], `${field}.content`) };
  });
}

function readContent(content: unknown, field: string): string {
  if (content === null || content === undefined) return '';
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((part, i) => {
        const p = part as Body | null;
        if (p && p['type'] === 'text' && typeof p['text'] === 'string') return p['text'];
        throw invalid(`${field}[${i}]`, 'a {"type": "text", "text": "..."} part', part);
      })
      .join('');
  }
  throw invalid(field, 'a string or an array of text parts', content);
}
