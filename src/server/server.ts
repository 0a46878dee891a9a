/**
 * The OpenAI-compatible HTTP server on node:http. It owns no engine: the caller passes an
 * AsyncEngineLike and shuts it down after close().
 */
import { readFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import type { AsyncEngineLike } from '../engine/api.ts';
import { httpStatusOf, KVError } from '../errors/index.ts';
import {
  createHttpServer,
  type Handler,
  type HttpListener,
  listen,
  Router,
  readJson,
  sendJson,
  sendText,
} from '../http/index.ts';
import { getLogger } from '../logging/logger.ts';
import { readEnv } from '../util/envs.ts';
import { CONNECTOR_INFO_PATH } from '../wire/index.ts';
import { AdmissionGate } from './admission.ts';
import { type ChatTemplatePolicy, DEFAULT_RESPONSE_ROLE } from './chat-options.ts';
import {
  devModeFromEnv,
  handleIsSleeping,
  handleResetPrefixCache,
  handleSleep,
  handleWakeUp,
} from './dev-routes.ts';
import { asBody, badRequest } from './fields.ts';
import { type GenerateHandlerContext, type GenerationKind, handleGenerate } from './generate-handler.ts';
import { HttpMetrics } from './http-metrics.ts';
import { backendInfo } from './info.ts';
import { cacheConfigInfo, ServerMetrics } from './metrics.ts';
import { modelList } from './model-card.ts';
import { handleRender } from './render.ts';
import { randomizationDisabled } from './request-id.ts';
import { RequestTimelines, TIMELINE_PATH } from './request-timeline.ts';
import { type LoraServingOptions, ServedModels } from './served-models.ts';
import { createSteering, type SteeringOptions } from './steering.ts';
import { detokenize, tokenize, tokenizerInfo } from './tokenize.ts';
import { REFERENCE_VLLM_VERSION } from './vllm-version.ts';

const log = getLogger('kvconnect.server.server');

export const DEFAULT_MAX_QUEUE = 1024;
/** 5xx answers that were asked for (injected, starting up): not logged as server errors. */
const STEERED = new Set<string>(['SERVER_INJECTED_SERVER_ERROR', 'SERVER_STARTING']);
export const DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024;

export interface ServerOptions extends SteeringOptions {
  engine: AsyncEngineLike;
  /** Name clients send as `model`; default: the engine config's served model name. */
  servedModelName?: string;
  /** When set, /v1/* requires `Authorization: Bearer <apiKey>`. */
  apiKey?: string | null;
  /** Requests accepted beyond the engine's max_num_seqs before answering 503. */
  maxQueue?: number;
  maxBodyBytes?: number;
  /** Default: VLLM_DISABLE_REQUEST_ID_RANDOMIZATION=1 in the environment. */
  disableRequestIdRandomization?: boolean;
  /** vLLM's development endpoints (POST /reset_prefix_cache). Default: VLLM_SERVER_DEV_MODE=1. */
  devMode?: boolean;
  /** --enable-prompt-tokens-details: usage.prompt_tokens_details.cached_tokens. */
  enablePromptTokensDetails?: boolean;
  /** --show-hidden-metrics-for-version, already checked (hidden-metrics.ts). */
  showHiddenMetricsForVersion?: string | null;
  /** --trust-request-chat-template: render a chat_template sent with a request. */
  trustRequestChatTemplate?: boolean;
  /** --enable-tokenizer-info-endpoint: GET /tokenizer_info. */
  enableTokenizerInfoEndpoint?: boolean;
  /** --enable-sleep-mode: /sleep and /wake_up (dev mode) may put the engine to sleep. */
  enableSleepMode?: boolean;
  /** --response-role: the answer's role when add_generation_prompt is true (default "assistant"). */
  responseRole?: string;
  /**
   * `serve --data-parallel-size N`: the process's N engines (this one among them); a request's
   * `X-data-parallel-rank` header runs it on the engine of that rank (src/server/data-parallel-rank.ts).
   */
  dataParallelEngines?: readonly AsyncEngineLike[];
  /** --lora-modules and --lora-allowed-dirs (with --enable-lora in the engine config). */
  lora?: LoraServingOptions | null;
  /** POST /v1/load_lora_adapter and /v1/unload_lora_adapter. Default: VLLM_ALLOW_RUNTIME_LORA_UPDATING. */
  allowRuntimeLoraUpdating?: boolean;
}

export interface ListeningAddress {
  host: string;
  port: number;
  url: string;
}

export interface KVServer {
  readonly metrics: ServerMetrics;
  readonly gate: AdmissionGate;
  /** Loads the --lora-modules adapters (once; start() does it too); rejects on the first that fails. */
  loadStaticLoras(): Promise<void>;
  start(host?: string, port?: number): Promise<ListeningAddress>;
  close(): Promise<void>;
}

export function packageVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
      version?: string;
    };
    return pkg.version ?? '0.0.0';
  } catch {
    return '0.0.0';
  }
}

export function createServer(options: ServerOptions): KVServer {
  const { engine } = options;
  const startedAt = performance.now();
  const servedModelName = options.servedModelName ?? engine.config.model.servedModelName;
  const metricsInfo = {
    modelName: servedModelName,
    engineIndex: engine.config.parallel.dataParallelRank,
    maxModelLen: engine.config.model.maxModelLen,
    cacheInfo: cacheConfigInfo(engine.config.cache, engine.numGpuBlocks ?? null),
  };
  const metrics = new ServerMetrics({
    ...metricsInfo,
    connectorMetrics: engine.kvConnectorMetricSpecs?.() ?? [],
    readStats: () => engine.stats(),
    emulation: engine.config.emulation ?? null,
    maxLoras: engine.config.lora?.maxLoras ?? null,
    showHiddenMetricsForVersion: options.showHiddenMetricsForVersion ?? null,
  });
  const unsubscribe = engine.onIterationStats?.((stats) => metrics.recordIteration(stats)) ?? null;
  const steering = createSteering(
    engine,
    { ...options, maxLoras: options.maxLoras ?? engine.config.lora?.maxLoras ?? 1 },
    metricsInfo,
  );
  const gate = new AdmissionGate(
    engine.config.scheduler.maxNumSeqs + (options.maxQueue ?? DEFAULT_MAX_QUEUE),
  );
  const chatTemplatePolicy: ChatTemplatePolicy = {
    trustRequestChatTemplate: options.trustRequestChatTemplate ?? false,
    responseRole: options.responseRole ?? DEFAULT_RESPONSE_ROLE,
  };
  const models = new ServedModels(engine, servedModelName, options.lora ?? null);
  const devMode = options.devMode ?? devModeFromEnv();
  const timelines = devMode ? new RequestTimelines() : null;
  const ctx: GenerateHandlerContext = {
    engine,
    dataParallelEngines: options.dataParallelEngines ?? [],
    servedModelName,
    models,
    gate,
    body: {
      maxBytes: options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES,
      tooLarge: 'SERVER_BODY_TOO_LARGE',
      invalidJson: 'SERVER_INVALID_JSON',
      limitHint: 'Send a shorter prompt, or start the server with a larger maxBodyBytes.',
    },
    disableRandomization: options.disableRequestIdRandomization ?? randomizationDisabled(),
    enablePromptTokensDetails: options.enablePromptTokensDetails ?? false,
    chatTemplatePolicy,
    onPromptFinished: (n, maxGenerationTokens) => metrics.observeFinishedPrompt(n, maxGenerationTokens),
    timelines,
  };
  const version = packageVersion();
  const renderCtx = { engine, servedModelName, models, body: ctx.body, chatTemplatePolicy };
  const tokenizeCtx = {
    tokenizer: engine.tokenizer,
    servedModelName,
    models,
    maxModelLen: engine.config.model.maxModelLen,
    chatTemplatePolicy,
  };

  /** A generation route: the injected failure (--failure-injection-rate) first, then the request. */
  const generate =
    (kind: GenerationKind): Handler =>
    (req, res) => {
      steering.injectFailure();
      return handleGenerate(ctx, kind, req, res);
    };

  const router = new Router({
    notFound: 'SERVER_ROUTE_NOT_FOUND',
    methodNotAllowed: 'SERVER_METHOD_NOT_ALLOWED',
  })
    .on('POST', '/v1/completions', generate('completion'))
    .on('POST', '/v1/chat/completions', generate('chat'))
    .on('POST', '/inference/v1/generate', generate('tokens'))
    .on('POST', '/v1/responses', generate('responses'))
    .on('GET', '/v1/models', (_req, res) =>
      sendJson(
        res,
        200,
        modelList(
          servedModelName,
          engine.config.model.model,
          engine.config.model.maxModelLen,
          models.adapterCards(),
        ),
      ),
    )
    .on('POST', '/tokenize', async (req, res) =>
      sendJson(res, 200, tokenize(await readJson(req, ctx.body), tokenizeCtx)),
    )
    .on('POST', '/detokenize', async (req, res) =>
      sendJson(res, 200, detokenize(await readJson(req, ctx.body), tokenizeCtx)),
    )
    .on('GET', '/health', (_req, res) => sendText(res, 200, '', 'text/plain'))
    // llm-d-inference-sim's readiness probe: 503 until --startup-duration has passed.
    .on('GET', '/health/ready', (_req, res) => {
      const waitMs = (options.startupDurationNs ?? 0) / 1e6 - (performance.now() - startedAt);
      if (waitMs > 0) {
        throw new KVError('SERVER_STARTING', 'The server is starting up (--startup-duration).', {
          hint: `Ready in ${Math.ceil(waitMs)} ms; poll GET /health/ready until it answers 200.`,
        });
      }
      sendJson(res, 200, {});
    })
    // vLLM's clients read `version` as the vLLM version: the one whose behaviour kvconnect follows.
    .on('GET', '/version', (_req, res) =>
      sendJson(res, 200, { version: REFERENCE_VLLM_VERSION, kvconnect_version: version }),
    )
    // SageMaker's health check and inference route, as vLLM serves them.
    .on('GET', '/ping', (_req, res) => sendText(res, 200, '', 'text/plain'))
    .on('POST', '/ping', (_req, res) => sendText(res, 200, '', 'text/plain'))
    .on('POST', '/invocations', async (req, res) => {
      steering.injectFailure();
      const body = asBody(await readJson(req, ctx.body));
      const kind = invocationKind(body);
      await handleGenerate(ctx, kind, req, res, body);
    })
    // vLLM's server load: requests in flight (kvconnect always tracks it).
    .on('GET', '/load', (_req, res) => sendJson(res, 200, { server_load: gate.inFlight }))
    .on('POST', '/v1/completions/render', (req, res) => handleRender(renderCtx, 'completion', req, res))
    .on('POST', '/v1/chat/completions/render', (req, res) => handleRender(renderCtx, 'chat', req, res))
    .on('GET', '/metrics', async (_req, res) => {
      const { contentType, body } = await (steering.fakeMetrics?.metrics ?? metrics).render();
      sendText(res, 200, body, contentType);
    })
    .on('GET', CONNECTOR_INFO_PATH, (_req, res) => sendJson(res, 200, backendInfo(engine, servedModelName)));
  // vLLM registers /tokenizer_info only with --enable-tokenizer-info-endpoint (it may expose the chat template).
  if (options.enableTokenizerInfoEndpoint) {
    router.on('GET', '/tokenizer_info', (_req, res) => sendJson(res, 200, tokenizerInfo(engine.tokenizer)));
  }
  if (timelines) {
    log.warn('SECURITY WARNING: Development endpoints are enabled! This should NOT be used in production!');
    router.on('POST', '/reset_prefix_cache', (req, res) =>
      handleResetPrefixCache(engine, ctx.body, req, res),
    );
    const admin = steering.admin();
    router
      .on('GET', '/admin/config', (req, res) => admin.handleGet(req, res))
      .on('POST', '/admin/config', (req, res) => admin.handlePost(ctx.body, req, res));
    const sleepMode = options.enableSleepMode ?? false;
    router
      .on('POST', '/sleep', (req, res) => handleSleep(engine, sleepMode, ctx.body, req, res))
      .on('POST', '/wake_up', (req, res) => handleWakeUp(engine, sleepMode, ctx.body, req, res))
      .on('GET', '/is_sleeping', (_req, res) => handleIsSleeping(engine, res))
      .on('GET', TIMELINE_PATH, (req, res) => timelines.handle(req, res));
  }

  if (options.allowRuntimeLoraUpdating ?? readEnv('VLLM_ALLOW_RUNTIME_LORA_UPDATING')) {
    log.warn(
      'LoRA dynamic loading & unloading is enabled in the API server. This should ONLY be used for local development!',
    );
    const reply = (res: ServerResponse, text: string): void => {
      res.writeHead(200, { 'content-length': Buffer.byteLength(text) });
      res.end(text);
    };
    router
      .on('POST', '/v1/load_lora_adapter', async (req, res) =>
        reply(res, await models.loadFromRequest(asBody(await readJson(req, ctx.body)))),
      )
      .on('POST', '/v1/unload_lora_adapter', async (req, res) =>
        reply(res, await models.unloadFromRequest(asBody(await readJson(req, ctx.body)))),
      );
  }

  const apiKey = options.apiKey ?? null;
  const httpMetrics = new HttpMetrics(metrics.registry, (url) => router.routeOf(url));
  const listener = router.listener({
    guard: (req) => {
      if (apiKey === null || !(req.url ?? '').startsWith('/v1/')) return;
      if (req.headers.authorization === `Bearer ${apiKey}`) return;
      throw new KVError('SERVER_UNAUTHORIZED', 'Unauthorized: missing or wrong API key.', {
        hint: 'Send the header "Authorization: Bearer <key>" with the key given to --api-key.',
      });
    },
    onError: (e, req) => {
      if (httpStatusOf(e) >= 500 && !(e instanceof KVError && STEERED.has(e.code)))
        log.error('Unhandled error on %s %s: %s', req.method, req.url, (e as Error).stack);
    },
  });
  const server = createHttpServer((req, res) => {
    httpMetrics.track(req, res);
    listener(req, res);
  });
  let listening: HttpListener | null = null;
  let staticLoras: Promise<void> | null = null;
  const loadStaticLoras = (): Promise<void> => {
    staticLoras ??= models.initStaticLoras();
    return staticLoras;
  };

  return {
    metrics,
    gate,
    loadStaticLoras,
    async start(host = '127.0.0.1', port = 8000) {
      await loadStaticLoras();
      listening = await listen(server, port, host);
      return { host: listening.host, port: listening.port, url: listening.url };
    },
    close() {
      unsubscribe?.();
      steering.fakeMetrics?.close();
      return listening?.close(1000) ?? Promise.resolve();
    },
  };
}

/**
 * vLLM's /invocations dispatches on the body's shape: `messages` is a chat request, `prompt`
 * a completion request; anything else is a 400 naming what is missing.
 */
function invocationKind(body: Record<string, unknown>): 'completion' | 'chat' {
  if ('messages' in body) return 'chat';
  if ('prompt' in body) return 'completion';
  throw badRequest(
    'Cannot determine the request type of /invocations: the body has neither messages nor prompt.',
    'body',
    'Send a chat completion request (messages) or a completion request (prompt).',
  );
}
