/**
 * vLLM's render endpoints, which routers call to get a request's token ids without running
 * it (llm-d's precise prefix-cache scorer): POST /v1/completions/render answers a list with
 * one GenerateRequest-shaped object per prompt, POST /v1/chat/completions/render one object.
 * Each carries `token_ids` (after truncate_prompt_tokens), `request_id`, `model`,
 * `sampling_params` and, when sent, `cache_salt` and `kv_transfer_params`. The request is
 * validated as the generation route would validate it.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { SamplingParams } from '../engine/api.ts';
import { type BodyRules, readJson, sendJson } from '../http/index.ts';
import { asBody } from './fields.ts';
import { type ParsePlanContext, parsePlan } from './generate-handler.ts';
import type { GenerationPlan } from './parse-request.ts';
import { externalRequestId } from './request-id.ts';

export interface RenderContext extends ParsePlanContext {
  body: BodyRules;
}

function samplingJson(s: SamplingParams): Record<string, unknown> {
  return {
    max_tokens: s.maxTokens,
    temperature: s.temperature,
    top_p: s.topP,
    top_k: s.topK,
    seed: s.seed,
    stop: s.stop,
    stop_token_ids: s.stopTokenIds,
    ignore_eos: s.ignoreEos,
    logprobs: s.logprobs,
    min_tokens: s.minTokens ?? 0,
  };
}

function rendered(
  plan: GenerationPlan,
  model: string,
  requestId: string,
  p: number,
): Record<string, unknown> {
  return {
    request_id: requestId,
    model,
    token_ids: plan.prompts[p] ?? [],
    sampling_params: samplingJson(plan.sampling[p]!),
    stream: plan.stream,
    ...(plan.cacheSalt === undefined ? {} : { cache_salt: plan.cacheSalt }),
    ...(plan.kvTransferParams === null ? {} : { kv_transfer_params: plan.kvTransferParams }),
  };
}

export async function handleRender(
  ctx: RenderContext,
  kind: 'completion' | 'chat',
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const plan = parsePlan(ctx, kind, asBody(await readJson(req, ctx.body)));
  const model = plan.model ?? ctx.servedModelName;
  const id = externalRequestId(req);
  if (kind === 'chat') {
    sendJson(res, 200, rendered(plan, model, `chatcmpl-${id}`, 0));
    return;
  }
  sendJson(
    res,
    200,
    plan.prompts.map((_, p) =>
      rendered(plan, model, `cmpl-${id}${plan.prompts.length > 1 ? `-${p}` : ''}`, p),
    ),
  );
}
