/**
 * POST /v1/completions and /v1/chat/completions: validate, admit, run the choices on the
 * engine, answer as one JSON body or as an SSE stream. A client that goes away aborts its
 * engine requests, which frees their KV blocks.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AsyncEngineLike, RequestOutputDelta } from '../engine/api.ts';
import { wallClockMs } from '../engine/iteration-stats.ts';
import type { LoRARequest } from '../engine/lora/lora-request.ts';
import { formatErrorJson, KVError, toErrorCode } from '../errors/index.ts';
import { type BodyRules, readJson, sendError, sendJson, writeEarlyHints } from '../http/index.ts';
import {
  formatParamsAhead,
  PARAMS_AHEAD_HEADER,
  PARAMS_AHEAD_HINT,
  wantsParamsAhead,
} from '../wire/index.ts';
import type { AdmissionGate } from './admission.ts';
import { beamSearchChoices } from './beam-search.ts';
import type { ChatTemplatePolicy } from './chat-options.ts';
import { engineForRequest } from './data-parallel-rank.ts';
import { asBody, type Body, badRequest } from './fields.ts';
import { buildEngineRequests, runChoices } from './generation.ts';
import { needsRejectionNotice } from './kv-transfer-params.ts';
import { checkServedModel } from './model-card.ts';
import {
  applyDelta,
  ChoiceState,
  chunkOf,
  echoChunk,
  fullResponse,
  type ResponseContext,
  recordDelta,
  roleChunk,
  usageChunk,
  usageOf,
} from './openai-response.ts';
import {
  type GenerationPlan,
  type ParseContext,
  parseChatRequest,
  parseCompletionRequest,
  parseTokensRequest,
} from './parse-request.ts';
import { notifyKvTransferRequestRejected } from './rejection.ts';
import { externalRequestId, internalRequestId } from './request-id.ts';
import type { RequestTimelines, TimelineRecorder } from './request-timeline.ts';
import { fullResponsesObject, parseResponsesRequest, streamResponses } from './responses-api.ts';
import type { ServedModels } from './served-models.ts';
import { SseWriter } from './sse.ts';
import { structuredOutputsField } from './structured-fields.ts';

export interface GenerateHandlerContext {
  engine: AsyncEngineLike;
  /** The process's in-process data-parallel engines, for `X-data-parallel-rank` ([] or [engine]: none). */
  dataParallelEngines?: readonly AsyncEngineLike[];
  servedModelName: string;
  /** The base model and its adapters; absent: only servedModelName is known. */
  models?: ServedModels;
  gate: AdmissionGate;
  body: BodyRules;
  disableRandomization: boolean;
  enablePromptTokensDetails?: boolean;
  chatTemplatePolicy?: ChatTemplatePolicy;
  /** Each prompt that finished: its n and the most tokens one of its choices generated. */
  onPromptFinished?: (n: number, maxGenerationTokens: number) => void;
  /** Request timelines (development mode), null: not recorded. */
  timelines?: RequestTimelines | null;
}

export type GenerationKind = GenerationPlan['kind'];

const RESPONSE_ID_PREFIX: Record<GenerationKind, string> = {
  completion: 'cmpl',
  chat: 'chatcmpl',
  tokens: 'generate-tokens',
  responses: 'resp',
};

export async function handleGenerate(
  ctx: GenerateHandlerContext,
  kind: GenerationKind,
  req: IncomingMessage,
  res: ServerResponse,
  /** The body when the caller already read it (POST /invocations). */
  preread?: unknown,
): Promise<void> {
  const receivedAt = ctx.timelines ? wallClockMs() : 0;
  let externalId = externalRequestId(req);
  let responseId = `${RESPONSE_ID_PREFIX[kind]}-${externalId}`;
  res.setHeader('x-request-id', externalId);
  let body: Body | undefined;
  let plan: GenerationPlan;
  let engine = ctx.engine;
  let lora: LoRARequest | null = null;
  try {
    body = asBody(preread ?? (await readJson(req, ctx.body)));
    // vLLM's tokens endpoint names the request by the header, else by the body's request_id.
    const bodyId = body['request_id'];
    if (kind === 'tokens' && req.headers['x-request-id'] === undefined && typeof bodyId === 'string') {
      externalId = bodyId;
      responseId = `${RESPONSE_ID_PREFIX[kind]}-${externalId}`;
      res.setHeader('x-request-id', externalId);
    }
    engine = engineForRequest(req, ctx.engine, ctx.dataParallelEngines ?? []);
    plan = kind === 'responses' ? parseResponses(ctx, body, externalId) : parsePlan(ctx, kind, body);
    lora = ctx.models?.resolve(plan.model) ?? null;
    await validateStructuredOutputs(engine, plan, body);
    ctx.gate.acquire(plan.prompts.length * plan.n);
  } catch (e) {
    if (body && needsRejectionNotice(body['kv_transfer_params'])) {
      void notifyKvTransferRequestRejected(
        engine,
        internalRequestId(responseId, ctx.disableRandomization),
        body['kv_transfer_params'],
      );
    }
    sendError(res, e);
    return;
  }

  const headers = { 'x-request-id': externalId };
  const timeline = ctx.timelines?.start(externalId, receivedAt) ?? null;
  const slots = plan.prompts.length * plan.n;
  const disconnect = new AbortController();
  const onClose = (): void => {
    if (!res.writableFinished) disconnect.abort();
  };
  res.on('close', onClose);
  try {
    const rctx: ResponseContext = {
      plan,
      id: responseId,
      created: Math.floor(Date.now() / 1000),
      model: plan.model ?? ctx.servedModelName,
      tokenizer: ctx.engine.tokenizer,
    };
    const requests = buildEngineRequests(plan, responseId, ctx.disableRandomization);
    for (const r of requests.requests) {
      if (lora) r.loraRequest = lora;
      if (timeline) r.recordMilestones = true;
    }
    const [only, ...more] = requests.requests;
    if (only && more.length === 0 && !plan.beamSearch && wantsParamsAhead(req.headers[PARAMS_AHEAD_HEADER])) {
      only.onKvTransferParamsAhead = (params) => {
        if (writeEarlyHints(res, { [PARAMS_AHEAD_HINT]: formatParamsAhead(params) })) timeline?.paramsAhead();
      };
    }
    const events = plan.beamSearch
      ? beamSearchChoices(
          engine,
          plan,
          plan.beamSearch,
          responseId,
          ctx.disableRandomization,
          disconnect.signal,
          lora,
        )
      : runChoices(engine, requests, plan.n, disconnect.signal);
    const choices = plan.stream
      ? kind === 'responses'
        ? await streamResponses(rctx, events, res, headers, failureOf)
        : await streamResponse(rctx, events, res, headers, timeline)
      : await jsonResponse(rctx, events, res, headers, timeline);
    if (choices && ctx.onPromptFinished) {
      for (let p = 0; p < plan.prompts.length; p++) {
        const own = choices.slice(p * plan.n, (p + 1) * plan.n);
        ctx.onPromptFinished(plan.n, Math.max(...own.map((c) => c.numTokens)));
      }
    }
  } finally {
    res.off('close', onClose);
    ctx.gate.release(slots);
  }
}

/** What parsing a generation request needs of the server (the render routes parse with it too). */
export type ParsePlanContext = Pick<
  GenerateHandlerContext,
  'engine' | 'servedModelName' | 'models' | 'enablePromptTokensDetails' | 'chatTemplatePolicy'
>;

function parseContext(ctx: ParsePlanContext): ParseContext {
  return {
    tokenizer: ctx.engine.tokenizer,
    maxModelLen: ctx.engine.config.model.maxModelLen,
    enablePromptTokensDetails: ctx.enablePromptTokensDetails ?? false,
    ...(ctx.chatTemplatePolicy ? { chatTemplatePolicy: ctx.chatTemplatePolicy } : {}),
  };
}

/** Compiles the request's constraint before admission: an invalid one is a 400 naming its field. */
async function validateStructuredOutputs(
  engine: AsyncEngineLike,
  plan: GenerationPlan,
  body: Body,
): Promise<void> {
  const params = plan.sampling[0]?.structuredOutputs;
  if (!params) return;
  if (!engine.validateStructuredOutputs)
    throw badRequest(
      'Structured outputs are not supported by this engine.',
      structuredOutputsField(body),
      'Leave the structured-output fields out.',
    );
  try {
    await engine.validateStructuredOutputs(params);
  } catch (e) {
    if (e instanceof KVError && e.field === 'structured_outputs')
      throw new KVError(e.code, e.message, {
        field: structuredOutputsField(body),
        ...(e.hint ? { hint: e.hint } : {}),
        cause: e,
      });
    throw e;
  }
}

function parseResponses(ctx: GenerateHandlerContext, body: Body, externalId: string): GenerationPlan {
  const plan = parseResponsesRequest(body, parseContext(ctx), externalId);
  checkServedModel(plan.model, ctx.servedModelName, ctx.models);
  return plan;
}

/** A completion, chat or tokens request parsed and checked against the served models. */
export function parsePlan(
  ctx: ParsePlanContext,
  kind: Exclude<GenerationKind, 'responses'>,
  body: Body,
): GenerationPlan {
  const parseCtx = parseContext(ctx);
  const plan =
    kind === 'completion'
      ? parseCompletionRequest(body, parseCtx)
      : kind === 'chat'
        ? parseChatRequest(body, parseCtx)
        : parseTokensRequest(body, parseCtx);
  checkServedModel(plan.model, ctx.servedModelName, ctx.models);
  return plan;
}

type Events = ReturnType<typeof runChoices>;

function choicesFor(plan: GenerationPlan): ChoiceState[] {
  return Array.from({ length: plan.prompts.length * plan.n }, (_, i) => new ChoiceState(i));
}

async function jsonResponse(
  rctx: ResponseContext,
  events: Events,
  res: ServerResponse,
  headers: Record<string, string>,
  timeline: TimelineRecorder | null,
): Promise<ChoiceState[] | null> {
  const choices = choicesFor(rctx.plan);
  try {
    for await (const { index, delta } of events) {
      timeline?.delta(delta);
      recordDelta(rctx, choices[index]!, delta);
      if (delta.finished && delta.finishReason === 'error') throw engineFailure(delta.error);
    }
  } catch (e) {
    if (!res.destroyed) sendError(res, e);
    return null;
  }
  if (res.destroyed) return null;
  const body =
    rctx.plan.kind === 'responses' ? fullResponsesObject(rctx, choices) : fullResponse(rctx, choices);
  sendJson(res, 200, body, headers);
  timeline?.end();
  return choices;
}

async function streamResponse(
  rctx: ResponseContext,
  events: Events,
  res: ServerResponse,
  headers: Record<string, string>,
  timeline: TimelineRecorder | null,
): Promise<ChoiceState[] | null> {
  const sse = new SseWriter(res, headers);
  const choices = choicesFor(rctx.plan);
  // vLLM sends chat's role chunks when the engine's first output arrives (after prefill), so a
  // client's time to first token includes the prefill.
  let roleSent = rctx.plan.kind !== 'chat';
  try {
    for await (const { index, delta } of events) {
      timeline?.delta(delta);
      if (!roleSent) {
        for (const c of choices) await sse.send(roleChunk(rctx, c.index));
        const echo = rctx.plan.chatEchoText;
        if (echo) for (const c of choices) await sse.send(echoChunk(rctx, c.index, echo));
        roleSent = true;
      }
      const choice = choices[index]!;
      const part = applyDelta(rctx, choice, delta);
      if (delta.finished && delta.finishReason === 'error') throw engineFailure(delta.error);
      // vLLM skips only increments with neither text nor tokens (a prefill chunk); its tokens
      // endpoint skips every increment without tokens.
      if (part.text === '' && part.tokenIds.length === 0 && (!delta.finished || rctx.plan.kind === 'tokens'))
        continue;
      await sse.send(chunkOf(rctx, choice, part, delta.finished));
      timeline?.firstChunk();
      if (sse.closed) return null;
    }
    if (rctx.plan.includeUsage) await sse.send(usageChunk(rctx, usageOf(rctx, choices)));
  } catch (e) {
    if (!sse.closed) {
      await sse.send(formatErrorJson(e));
      await sse.done();
    }
    return null;
  }
  await sse.done();
  timeline?.end();
  return choices;
}

/** The error an engine-failed final delta carries, else null. */
function failureOf(delta: RequestOutputDelta): Error | null {
  return delta.finished && delta.finishReason === 'error' ? engineFailure(delta.error) : null;
}

function engineFailure(error: { code: string; message: string; hint?: string } | undefined): KVError {
  return new KVError(
    toErrorCode(error?.code, 'ENGINE_ERROR'),
    error?.message ?? 'The engine failed this request.',
    error?.hint === undefined ? {} : { hint: error.hint },
  );
}
