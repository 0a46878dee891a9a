/**
 * The OpenAI-compatible HTTP server on node:http. It owns no engine: the caller passes an
 * AsyncEngineLike and shuts it down after close().
 */
import { readFileSync } from 'node:fs';
import {
  createServer as createHttpServer,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import type { AsyncEngineLike } from '../engine/api.ts';
import { getLogger } from '../logging/logger.ts';
import { AdmissionGate } from './admission.ts';
import { devModeFromEnv, handleResetPrefixCache } from './dev-routes.ts';
import { type GenerateHandlerContext, handleGenerate } from './generate-handler.ts';
import { HttpError, sendError } from './http-errors.ts';
import { DEFAULT_MAX_BODY_BYTES, readJson, sendJson, sendText } from './http-io.ts';
import { backendInfo } from './info.ts';
import { cacheConfigInfo, ServerMetrics } from './metrics.ts';
import { modelList } from './model-card.ts';
import { randomizationDisabled } from './request-id.ts';
import { Router } from './router.ts';
import { detokenize, tokenize } from './tokenize.ts';

const log = getLogger('kvconnect.server');

export const DEFAULT_MAX_QUEUE = 1024;

export interface ServerOptions {
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
}

export interface ListeningAddress {
  host: string;
  port: number;
  url: string;
}

export interface KVServer {
  readonly metrics: ServerMetrics;
  readonly gate: AdmissionGate;
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
  const servedModelName = options.servedModelName ?? engine.config.model.servedModelName;
  const kv = engine.config.kvTransferConfig;
  const children = Array.isArray(kv?.kv_connector_extra_config['connectors'])
    ? (kv.kv_connector_extra_config['connectors'] as Array<{ kv_connector?: unknown }>)
        .map((c) => c.kv_connector)
        .filter((n): n is string => typeof n === 'string')
    : [];
  const metrics = new ServerMetrics({
    modelName: servedModelName,
    maxModelLen: engine.config.model.maxModelLen,
    cacheInfo: cacheConfigInfo(engine.config.cache, engine.numGpuBlocks ?? null),
    connectorName: kv?.kv_connector ?? null,
    connectorChildren: children,
    readStats: () => engine.stats(),
  });
  const unsubscribe = engine.onIterationStats?.((stats) => metrics.recordIteration(stats)) ?? null;
  const gate = new AdmissionGate(
    engine.config.scheduler.maxNumSeqs + (options.maxQueue ?? DEFAULT_MAX_QUEUE),
  );
  const ctx: GenerateHandlerContext = {
    engine,
    servedModelName,
    gate,
    maxBodyBytes: options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES,
    disableRandomization: options.disableRequestIdRandomization ?? randomizationDisabled(),
  };
  const version = packageVersion();
  const tokenizeCtx = {
    tokenizer: engine.tokenizer,
    servedModelName,
    maxModelLen: engine.config.model.maxModelLen,
  };
  const maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;

  const router = new Router()
    .on('POST', '/v1/completions', (req, res) => handleGenerate(ctx, 'completion', req, res))
    .on('POST', '/v1/chat/completions', (req, res) => handleGenerate(ctx, 'chat', req, res))
    .on('GET', '/v1/models', (_req, res) =>
      sendJson(
        res,
        200,
        modelList(servedModelName, engine.config.model.model, engine.config.model.maxModelLen),
      ),
    )
    .on('POST', '/tokenize', async (req, res) =>
      sendJson(res, 200, tokenize(await readJson(req, maxBodyBytes), tokenizeCtx)),
    )
    .on('POST', '/detokenize', async (req, res) =>
      sendJson(res, 200, detokenize(await readJson(req, maxBodyBytes), tokenizeCtx)),
    )
    .on('GET', '/health', (_req, res) => sendText(res, 200, '', 'text/plain'))
    .on('GET', '/version', (_req, res) => sendJson(res, 200, { version }))
    .on('GET', '/metrics', async (_req, res) => {
      const { contentType, body } = await metrics.render();
      sendText(res, 200, body, contentType);
    })
    .on('GET', '/kvconnect/info', (_req, res) => sendJson(res, 200, backendInfo(engine, servedModelName)));
  if (options.devMode ?? devModeFromEnv()) {
    log.warn('SECURITY WARNING: Development endpoints are enabled! This should NOT be used in production!');
    router.on('POST', '/reset_prefix_cache', (req, res) => handleResetPrefixCache(engine, req, res));
  }

  const apiKey = options.apiKey ?? null;
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    try {
      const handler = router.resolve(req.method ?? 'GET', req.url ?? '/');
      if (
        apiKey !== null &&
        (req.url ?? '').startsWith('/v1/') &&
        req.headers.authorization !== `Bearer ${apiKey}`
      ) {
        throw new HttpError(401, 'SERVER_UNAUTHORIZED', 'Unauthorized: missing or wrong API key.', {
          hint: 'Send the header "Authorization: Bearer <key>" with the key given to --api-key.',
        });
      }
      await handler(req, res);
    } catch (e) {
      if (!(e instanceof HttpError))
        log.error('Unhandled error on %s %s: %s', req.method, req.url, (e as Error).stack);
      sendError(res, e);
    }
  };

  const server: Server = createHttpServer((req, res) => {
    void handle(req, res);
  });
  server.on('clientError', (_err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
    else socket.destroy();
  });

  return {
    metrics,
    gate,
    start(host = '127.0.0.1', port = 8000) {
      return new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host, () => {
          server.off('error', reject);
          const addr = server.address() as AddressInfo;
          const shownHost = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
          resolve({ host: addr.address, port: addr.port, url: `http://${shownHost}:${addr.port}` });
        });
      });
    },
    close() {
      unsubscribe?.();
      return new Promise((resolve) => {
        if (!server.listening) {
          resolve();
          return;
        }
        server.close(() => resolve());
        server.closeIdleConnections();
        setTimeout(() => server.closeAllConnections(), 1000).unref();
      });
    },
  };
}
