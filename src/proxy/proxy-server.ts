/**
 * `kvconnect proxy`: an OpenAI-compatible front door for a set of prefill and decode
 * servers (kvconnect or vLLM). Routes completions through the P/D flow of the backends'
 * connector, answers health checks in the shape of vLLM's toy proxy, and forwards
 * GET /v1/models to a decode backend.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createHttpServer, type HttpListener, listen, Router, sendJson, writeChunk } from '../http/index.ts';
import { getLogger } from '../logging/logger.ts';
import { BackendPool } from './backend-pool.ts';
import { type HandlerDeps, handleCompletion } from './disagg-handler.ts';
import { type DiscoveryListener, startDiscovery } from './discovery.ts';
import { createPolicy } from './policies.ts';
import { noBackend, optionsInvalid, PROXY_ROUTES } from './proxy-errors.ts';
import { PROXY_DEFAULTS, type ProxyOptions } from './types.ts';
import { Upstream } from './upstream.ts';

const log = getLogger('proxy');

export interface RunningProxy {
  url: string;
  port: number;
  /** The discovery listener's port, when --discovery-port was given. */
  discoveryPort: number | undefined;
  pool: BackendPool;
  close(): Promise<void>;
}

/** Fills defaults; `prefill`, `decode` and `port` are required (port 0 = any free port). */
export function resolveProxyOptions(partial: Partial<ProxyOptions> & { port: number }): ProxyOptions {
  return {
    prefill: [],
    decode: [],
    ...PROXY_DEFAULTS,
    push: {},
    ...partial,
  };
}

export async function startProxy(options: ProxyOptions): Promise<RunningProxy> {
  if (options.discoveryPort === undefined && (options.prefill.length === 0 || options.decode.length === 0)) {
    throw optionsInvalid(
      'The proxy needs at least one --prefill and one --decode URL',
      'Pass --prefill http://HOST:PORT and --decode http://HOST:PORT (repeatable), or --discovery-port N for MoRIIO instances that register themselves.',
    );
  }
  const upstream = new Upstream();
  const pool = new BackendPool(upstream, options);
  for (const url of options.prefill) pool.add(url, 'prefill');
  for (const url of options.decode) pool.add(url, 'decode');
  await pool.checkAll();
  pool.start();
  const deps: HandlerDeps = {
    pool,
    policy: createPolicy(options.policy, options.prefixCacheEntries),
    upstream,
    options,
  };

  const discovery: DiscoveryListener | undefined =
    options.discoveryPort === undefined
      ? undefined
      : await startDiscovery(pool, options.discoveryHost, options.discoveryPort, options.discoveryTtlMs);

  const server = createHttpServer(routes(deps).listener());
  server.keepAliveTimeout = 30_000;
  let listening: HttpListener;
  try {
    listening = await listen(server, options.port, options.host);
  } catch (e) {
    await discovery?.close();
    await pool.close();
    await upstream.close();
    throw e;
  }
  const { port } = listening;
  const url = `http://${options.host.includes(':') ? `[${options.host}]` : options.host}:${port}`;
  log.info(
    'proxy listening on %s (policy %s, connector %s, %d prefill, %d decode%s)',
    url,
    options.policy,
    options.kvConnector ?? 'from backends',
    options.prefill.length,
    options.decode.length,
    discovery ? `, discovery on port ${discovery.port}` : '',
  );
  return {
    url,
    port,
    discoveryPort: discovery?.port,
    pool,
    close: async () => {
      await listening.close();
      await discovery?.close();
      await pool.close();
      await upstream.close();
    },
  };
}

function routes(deps: HandlerDeps): Router {
  const health = (_req: IncomingMessage, res: ServerResponse): void => {
    const p = deps.pool.healthy('prefill').length;
    const d = deps.pool.healthy('decode').length;
    const ok = p > 0 && d > 0;
    sendJson(res, ok ? 200 : 503, {
      status: ok ? 'ok' : 'unavailable',
      prefill_instances: p,
      decode_instances: d,
    });
  };
  return new Router(PROXY_ROUTES)
    .on('POST', '/v1/completions', (req, res) => handleCompletion(deps, '/v1/completions', req, res))
    .on('POST', '/v1/chat/completions', (req, res) =>
      handleCompletion(deps, '/v1/chat/completions', req, res),
    )
    .on('GET', '/health', health)
    .on('GET', '/healthcheck', health)
    .on('GET', '/v1/models', (req, res) => forwardModels(deps, req, res));
}

async function forwardModels(deps: HandlerDeps, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const backend = deps.pool.healthy('decode')[0];
  if (!backend) throw noBackend('decode');
  const auth = req.headers.authorization;
  const up = await deps.upstream.get(
    `${backend.url}/v1/models`,
    AbortSignal.timeout(10_000),
    auth ? { authorization: auth } : {},
  );
  res.writeHead(up.status, { 'content-type': String(up.headers['content-type'] ?? 'application/json') });
  for await (const chunk of up.body as AsyncIterable<Uint8Array>) await writeChunk(res, chunk);
  res.end();
}
