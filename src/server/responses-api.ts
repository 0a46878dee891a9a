/**
 * vLLM's POST /v1/responses for text: the request becomes chat messages (`instructions` as a
 * system message, `input` as a string or a list of message items) and chat sampling fields,
 * so it is validated and run as a chat completion; the answer is a Response object (one
 * assistant message of output_text), or, streamed, the Responses API's named events:
 * response.created, response.in_progress, output_item.added, content_part.added,
 * output_text.delta per increment, output_text.done, content_part.done, output_item.done,
 * response.completed (sequence numbers from 0, no `[DONE]`). What needs a response store
 * (previous_response_id, background) or a parser kvconnect lacks (tools, structured text
 * formats, prompt templates) is a 400 naming the field.
 */
import { randomBytes } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { FinishReason, RequestOutputDelta } from '../engine/api.ts';
import { formatErrorJson } from '../errors/index.ts';
import { type Body, badRequest, invalid, optBool, optNumber, optObject, optString } from './fields.ts';
import { chatLogprobs } from './logprobs-format.ts';
import { applyDelta, ChoiceState, type ResponseContext, usageOf } from './openai-response.ts';
import {
  type GenerationPlan,
  type ParseContext,
  parseChatRequest,
  type ResponsesEcho,
} from './parse-request.ts';
import { SseWriter } from './sse.ts';

const LOGPROBS_INCLUDE = 'message.output_text.logprobs';
const KNOWN_INCLUDES = new Set([
  'code_interpreter_call.outputs',
  'computer_call_output.output.image_url',
  'file_search_call.results',
  'message.input_image.image_url',
  LOGPROBS_INCLUDE,
  'reasoning.encrypted_content',
]);

function contentText(content: unknown, field: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw invalid(field, 'a string or a list of input_text parts', content);
  return content
    .map((part, i) => {
      const p = part as Body;
      const type = p?.['type'];
      if (
        (type === 'input_text' || type === 'output_text' || type === 'text') &&
        typeof p['text'] === 'string'
      )
        return p['text'];
      throw badRequest(
        `${field}[${i}] of type ${JSON.stringify(type)} is not supported: kvconnect serves text.`,
        `${field}[${i}].type`,
        'Send text parts ({"type": "input_text", "text": "..."}).',
      );
    })
    .join('');
}

/** `input` as chat messages (message items only: kvconnect has no tool calls or images). */
function inputMessages(input: unknown): Array<{ role: string; content: string }> {
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  if (!Array.isArray(input) || input.length === 0)
    throw invalid('input', 'a string or a non-empty list of message items', input);
  return input.map((item, i) => {
    const it = item as Body;
    const type = it?.['type'] ?? 'message';
    if (type !== 'message' || typeof it['role'] !== 'string')
      throw badRequest(
        `input[${i}] of type ${JSON.stringify(type)} is not supported: kvconnect serves message items.`,
        `input[${i}].type`,
        'Send {"role": "user", "content": "..."} items (no function calls, reasoning or images).',
      );
    return { role: it['role'], content: contentText(it['content'], `input[${i}].content`) };
  });
}

function refuse(body: Body): void {
  const present = (key: string) => body[key] !== undefined && body[key] !== null;
  if (present('previous_response_id'))
    throw badRequest(
      'previous_response_id is not supported: kvconnect keeps no response store.',
      'previous_response_id',
      'Send the whole conversation in input instead.',
    );
  if (optBool(body, 'background') === true)
    throw badRequest(
      'background is not supported: kvconnect keeps no response store.',
      'background',
      'Leave background out (or false).',
    );
  if (present('prompt')) throw badRequest('prompt template is not supported', 'prompt', 'Leave prompt out.');
  if ((optNumber(body, 'priority', { integer: true }) ?? 0) !== 0)
    throw badRequest(
      'Request body field `priority` is not supported.',
      'priority',
      'Leave priority out (or 0).',
    );
  const format = (optObject(body, 'text')?.['format'] as Body | undefined)?.['type'];
  if (format !== undefined && format !== 'text' && format !== 'json_schema')
    throw badRequest(
      `text.format ${JSON.stringify(format)} is not supported by this server.`,
      'text',
      'Send text.format "text" or "json_schema" (or leave it out).',
    );
  if (format !== undefined && body['structured_outputs'] !== undefined && body['structured_outputs'] !== null)
    throw badRequest(
      'Cannot specify both structured_outputs and text.format',
      'structured_outputs',
      'Keep one: text.format json_schema, or structured_outputs.',
    );
  const salt = body['cache_salt'];
  if (salt !== undefined && salt !== null && (typeof salt !== 'string' || salt === ''))
    throw badRequest(
      "Parameter 'cache_salt' must be a non-empty string if provided.",
      'cache_salt',
      'Send a random string, or leave cache_salt out.',
    );
}

function readIncludes(body: Body): string[] {
  const include = body['include'];
  if (include === undefined || include === null) return [];
  if (!Array.isArray(include) || !include.every((v) => typeof v === 'string' && KNOWN_INCLUDES.has(v)))
    throw invalid('include', `a list of ${[...KNOWN_INCLUDES].join(', ')}`, include);
  return include as string[];
}

/** vLLM: structured_outputs as in chat, or text.format json_schema as its `json` constraint. */
function textFormat(body: Body): Body {
  const format = optObject(body, 'text')?.['format'] as Body | undefined;
  if (format?.['type'] === 'json_schema' && format['schema'] !== undefined && format['schema'] !== null)
    return { structured_outputs: { json: format['schema'] } };
  return { structured_outputs: body['structured_outputs'] };
}

/** A Responses request as a GenerationPlan of kind `responses`. */
export function parseResponsesRequest(body: Body, ctx: ParseContext, externalId: string): GenerationPlan {
  refuse(body);
  const includes = readIncludes(body);
  const instructions = optString(body, 'instructions') ?? null;
  const messages = [
    ...(instructions === null ? [] : [{ role: 'system', content: instructions }]),
    ...inputMessages(body['input']),
  ];
  const logprobs = includes.includes(LOGPROBS_INCLUDE);
  const maxOutput = optNumber(body, 'max_output_tokens', { integer: true, min: 1 }) ?? null;
  const chatBody: Body = {
    model: body['model'],
    messages,
    stream: body['stream'],
    temperature: body['temperature'],
    top_p: body['top_p'],
    top_k: body['top_k'],
    seed: body['seed'],
    stop: body['stop'],
    ignore_eos: body['ignore_eos'],
    repetition_penalty: body['repetition_penalty'],
    logit_bias: body['logit_bias'],
    cache_salt: body['cache_salt'],
    kv_transfer_params: body['kv_transfer_params'],
    tools: body['tools'],
    tool_choice: body['tool_choice'],
    ...(logprobs ? { logprobs: true, top_logprobs: body['top_logprobs'] ?? 0 } : {}),
    ...textFormat(body),
  };
  const plan = parseChatRequest(chatBody, ctx);
  // vLLM: max_output_tokens caps what the context leaves (never an error).
  const sampling = plan.sampling.map((s) => ({
    ...s,
    maxTokens: maxOutput === null ? s.maxTokens : Math.min(maxOutput, s.maxTokens),
  }));
  const requestId = optString(body, 'request_id') ?? `resp_${externalId}`;
  const tools = body['tools'];
  return {
    ...plan,
    kind: 'responses',
    sampling,
    responses: {
      id: requestId,
      instructions,
      metadata: body['metadata'] ?? null,
      parallelToolCalls: optBool(body, 'parallel_tool_calls') ?? true,
      toolChoice: body['tool_choice'] ?? 'auto',
      tools: Array.isArray(tools) ? tools : [],
      background: false,
      maxToolCalls: optNumber(body, 'max_tool_calls', { integer: true, min: 0 }) ?? null,
      previousResponseId: null,
      reasoning: body['reasoning'] ?? null,
      serviceTier: optString(body, 'service_tier') ?? 'auto',
      text: body['text'] ?? null,
      truncation: optString(body, 'truncation') ?? 'disabled',
      user: optString(body, 'user') ?? null,
      logprobs,
    },
  };
}

type Status = 'in_progress' | 'completed' | 'incomplete' | 'cancelled' | 'failed';

function statusOf(reason: FinishReason | null): Status {
  if (reason === 'length') return 'incomplete';
  if (reason === 'abort') return 'cancelled';
  if (reason === 'error') return 'failed';
  return 'completed';
}

function echoOf(ctx: ResponseContext): ResponsesEcho {
  const echo = ctx.plan.responses;
  if (!echo) throw new Error('a responses plan carries its request echo');
  return echo;
}

function outputLogprobs(ctx: ResponseContext, choice: ChoiceState): unknown[] | null {
  if (!echoOf(ctx).logprobs) return null;
  return chatLogprobs(ctx.tokenizer, choice.tokenIds, choice.entries, ctx.plan.logprobs ?? 0, false);
}

function outputText(
  ctx: ResponseContext,
  choice: ChoiceState,
  withLogprobs: boolean,
): Record<string, unknown> {
  return {
    type: 'output_text',
    text: choice.text,
    annotations: [],
    ...(withLogprobs ? { logprobs: outputLogprobs(ctx, choice) } : {}),
  };
}

function messageItem(
  itemId: string,
  content: Array<Record<string, unknown>>,
  status: 'in_progress' | 'completed',
): Record<string, unknown> {
  return { id: itemId, type: 'message', role: 'assistant', content, status };
}

/** vLLM's ResponsesResponse (from_request), with `output` and `usage` as given. */
function responseObject(
  ctx: ResponseContext,
  status: Status,
  output: unknown[],
  choice: ChoiceState | null,
): Record<string, unknown> {
  const echo = echoOf(ctx);
  const sampling = ctx.plan.sampling[0]!;
  let usage: unknown = null;
  if (choice !== null && status !== 'in_progress') {
    const u = usageOf(ctx, [choice]);
    usage = {
      input_tokens: u.prompt_tokens,
      input_tokens_details: { cached_tokens: choice.cachedTokens },
      output_tokens: u.completion_tokens,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: u.total_tokens,
    };
  }
  return {
    id: echo.id,
    created_at: ctx.created,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: echo.instructions,
    metadata: echo.metadata,
    model: ctx.model,
    object: 'response',
    output,
    parallel_tool_calls: echo.parallelToolCalls,
    temperature: sampling.temperature,
    tool_choice: echo.toolChoice,
    tools: echo.tools,
    top_p: sampling.topP,
    background: echo.background,
    max_output_tokens: sampling.maxTokens,
    max_tool_calls: echo.maxToolCalls,
    previous_response_id: echo.previousResponseId,
    prompt: null,
    reasoning: echo.reasoning,
    service_tier: echo.serviceTier,
    status,
    text: echo.text,
    top_logprobs: echo.logprobs ? (ctx.plan.logprobs ?? 0) : null,
    truncation: echo.truncation,
    usage,
    user: echo.user,
    input_messages: null,
    output_messages: null,
    ...(choice?.kvTransferParams ? { kv_transfer_params: choice.kvTransferParams } : {}),
  };
}

function newItemId(): string {
  return `msg_${randomBytes(16).toString('hex')}`;
}

/** The non-streamed Response: one assistant message of output_text. */
export function fullResponsesObject(ctx: ResponseContext, choices: readonly ChoiceState[]): unknown {
  const choice = choices[0]!;
  const item = messageItem(newItemId(), [outputText(ctx, choice, true)], 'completed');
  return responseObject(ctx, statusOf(choice.finishReason), [item], choice);
}

type Events = AsyncIterable<{ index: number; delta: RequestOutputDelta }>;

/** Streams the Responses API's events; null when the client left or the engine failed. */
export async function streamResponses(
  ctx: ResponseContext,
  events: Events,
  res: ServerResponse,
  headers: Record<string, string>,
  onFailure: (delta: RequestOutputDelta) => Error | null,
): Promise<ChoiceState[] | null> {
  const sse = new SseWriter(res, headers);
  const choice = new ChoiceState(0);
  const itemId = newItemId();
  let sequence = 0;
  const send = (type: string, fields: Record<string, unknown>): Promise<void> =>
    sse.sendEvent(type, { type, sequence_number: sequence++, ...fields });
  const where = { output_index: 0, item_id: itemId, content_index: 0 };
  try {
    await send('response.created', { response: responseObject(ctx, 'in_progress', [], null) });
    await send('response.in_progress', { response: responseObject(ctx, 'in_progress', [], null) });
    let opened = false;
    for await (const { delta } of events) {
      const part = applyDelta(ctx, choice, delta);
      const failure = onFailure(delta);
      if (failure) throw failure;
      if (part.text === '') continue;
      if (!opened) {
        await send('response.output_item.added', {
          output_index: 0,
          item: messageItem(itemId, [], 'in_progress'),
        });
        await send('response.content_part.added', {
          ...where,
          part: { type: 'output_text', text: '', annotations: [], logprobs: [] },
        });
        opened = true;
      }
      const logprobs = echoOf(ctx).logprobs
        ? ((part.logprobs as { content?: unknown[] })?.content ?? [])
        : [];
      await send('response.output_text.delta', { ...where, delta: part.text, logprobs });
      if (sse.closed) return null;
    }
    const status = statusOf(choice.finishReason);
    if (opened) {
      const logprobs = outputLogprobs(ctx, choice) ?? [];
      await send('response.output_text.done', { ...where, text: choice.text, logprobs });
      await send('response.content_part.done', { ...where, part: outputText(ctx, choice, false) });
    }
    const item = messageItem(itemId, [outputText(ctx, choice, true)], 'completed');
    if (opened) await send('response.output_item.done', { output_index: 0, item });
    await send('response.completed', { response: responseObject(ctx, status, [item], choice) });
  } catch (e) {
    if (!sse.closed) {
      await sse.sendEvent('error', formatErrorJson(e));
      sse.end();
    }
    return null;
  }
  sse.end();
  return [choice];
}
