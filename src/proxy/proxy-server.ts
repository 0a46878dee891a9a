/**
 * `kvconnect proxy`: an OpenAI-compatible front door for a set of prefill and decode
 * servers (kvconnect or vLLM). Routes completions through the P/D flow of the backends'
 * connector, answers health checks in the shape of vLLM's toy proxy, and forwards
 * GET /v1/models to a decode backend.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createHttpServer, type HttpListener, listen, Router, sendJson, writeChunk } from '../http/index.ts';
import { getLogger } from '../logging/logger.ts';
import { loadTokenizer } from '../tokenizer/load.ts';
import { bracketHost } from '../util/host.ts';
import { isPdConnector, PD_CONNECTORS } from '../wire/index.ts';
import type { Backend } from './backend.ts';
import { BackendPool } from './backend-pool.ts';
import { ConversationKvCache } from './conversation-cache.ts';
import { type HandlerDeps, handleCompletion } from './disagg-handler.ts';
import { type DiscoveryListener, startDiscovery } from './discovery.ts';
import type { KvAwareDeps } from './kv-aware-policy.ts';
import { KvEventsFeed } from './kv-events-feed.ts';
import { KvBlockIndex } from './kv-index.ts';
import { createPolicy } from './policies.ts';
import { PromptBlockHasher } from './prompt-blocks.ts';
import { noBackend, optionsInvalid, PROXY_ROUTES } from './proxy-errors.ts';
import { ProxyMetrics } from './proxy-metrics.ts';
import { PROXY_DEFAULTS, type ProxyOptions } from './types.ts';
import { Upstream } from './upstream.ts';

const log = getLogger('kvconnect.proxy.proxy-server');

export interface RunningProxy {
  url: string;
  port: number;
  /** The discovery listener's port, when --discovery-port was given. */
  discoveryPort: number | undefined;
  pool: BackendPool;
  /** kv_aware's KV event subscriptions and block index; null for other policies. */
  kvEvents: KvEventsFeed | null;
  close(): Promise<void>;
}

/** Fills defaults; `prefill`, `decode` and `port` are required (port 0 = any free port). */
export function resolveProxyOptions(partial: Partial<ProxyOptions> & { port: number }): ProxyOptions {
  return {
    prefill: [],
    decode: [],
    ...PROXY_DEFAULTS,
    push: {},
    kvEvents: {},
    ...partial,
  };
}

/**
 * Every check startProxy makes before it opens a socket or calls a backend (`kvconnect proxy
 * --dry-run`): backends given, the connector known, and for kv_aware its weights and a
 * tokenizer that loads.
 */
export function validateProxyOptions(options: ProxyOptions): void {
  checkBackends(options);
  if (options.policy === 'kv_aware') kvAwareSettings(options);
}

function checkBackends(options: ProxyOptions): void {
  if (
    options.discoveryPort === undefined &&
    (options.decode.length === 0 || (options.prefill.length === 0 && !options.prefillFallback))
  ) {
    throw optionsInvalid(
      'The proxy needs at least one --prefill and one --decode URL',
      'Pass --prefill http://HOST:PORT and --decode http://HOST:PORT (repeatable), or --discovery-port N for MoRIIO instances that register themselves. Without --prefill every request goes to a decode instance alone, which --no-prefill-fallback forbids.',
    );
  }
  if (options.kvConnector !== undefined && !isPdConnector(options.kvConnector)) {
    throw optionsInvalid(
      `kvConnector (--kv-connector) names ${JSON.stringify(options.kvConnector)}, for which the proxy has no P/D flow`,
      `Pass one of ${PD_CONNECTORS.join(', ')}, or leave it out to ask each backend GET /kvconnect/info.`,
    );
  }
}

export async function startProxy(options: ProxyOptions): Promise<RunningProxy> {
  checkBackends(options);
  const metrics = new ProxyMetrics();
  const kvAware = options.policy === 'kv_aware' ? kvAwareDeps(options, metrics) : null;
  const upstream = new Upstream();
  const feed = kvAware?.feed ?? null;
  const pool = new BackendPool(upstream, {
    ...options,
    ...(feed ? { onBackendChange: (b: Backend) => (b.healthy ? feed.attach(b) : feed.forget(b)) } : {}),
  });
  for (const url of options.prefill) pool.add(url, 'prefill');
  for (const url of options.decode) pool.add(url, 'decode');
  await pool.checkAll();
  pool.start();
  const deps: HandlerDeps = {
    pool,
    conversations: new ConversationKvCache(),
    policy: createPolicy(options.policy, options.prefixCacheEntries, kvAware),
    upstream,
    options,
    metrics,
  };
  if (options.prefill.length === 0 && options.discoveryPort === undefined) {
    log.info('no --prefill instance: every request is served by a decode instance alone');
  }

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
  const url = `http://${bracketHost(options.host)}:${port}`;
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
    kvEvents: feed,
    close: async () => {
      await listening.close();
      await discovery?.close();
      await pool.close();
      await feed?.close();
      await upstream.close();
    },
  };
}

/** kv_aware's tokenizer and cost weights; a bad --tokenizer or weight fails the start-up. */
function kvAwareSettings(options: ProxyOptions): {
  tokenizer: ReturnType<typeof loadTokenizer>;
  weights: NonNullable<KvAwareDeps['weights']>;
} {
  if (!options.tokenizer) {
    throw optionsInvalid(
      '--policy kv_aware needs --tokenizer',
      "Pass --tokenizer DIR (the model's directory with tokenizer.json) or the preset name the servers run (e.g. --tokenizer tiny), so the proxy computes the engines' block hashes.",
    );
  }
  const weights = {
    overlapCredit: costWeight(
      'kvAwareOverlapCredit',
      '--kv-aware-overlap-credit',
      options.kvAwareOverlapCredit,
    ),
    runningCost: costWeight('kvAwareRunningCost', '--kv-aware-running-cost', options.kvAwareRunningCost),
  };
  return { tokenizer: loadTokenizer(options.tokenizer), weights };
}

/** kv_aware's tokenizer, block index and KV event subscriptions. */
function kvAwareDeps(options: ProxyOptions, metrics: ProxyMetrics): KvAwareDeps {
  const { tokenizer, weights } = kvAwareSettings(options);
  const feed = new KvEventsFeed(new KvBlockIndex(), {
    endpoints: new Map(Object.entries(options.kvEvents ?? {})),
    blockSize: options.kvEventsBlockSize,
    hashAlgo: options.kvEventsHashAlgo,
  });
  return { feed, hasher: new PromptBlockHasher(tokenizer), metrics, weights };
}

/** A weight of kv_aware's cost: a finite number >= 0. */
function costWeight(field: keyof ProxyOptions, flag: string, value: unknown): number {
  if (typeof value === 'number' && Number.isFinite(value) && value >= 0) return value;
  const fallback = PROXY_DEFAULTS[field as keyof typeof PROXY_DEFAULTS];
  throw optionsInvalid(
    `${field} (${flag}) must be a finite number >= 0; received ${JSON.stringify(value) ?? String(value)}`,
    `Pass a number such as ${fallback} (the default), or leave it out. See docs/proxy.md#policies.`,
  );
}

function routes(deps: HandlerDeps): Router {
  const health = (_req: IncomingMessage, res: ServerResponse): void => {
    const p = deps.pool.healthy('prefill').length;
    const d = deps.pool.healthy('decode').length;
    const ok = d > 0 && (p > 0 || deps.options.prefillFallback);
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
    .on('GET', '/metrics', async (_req, res) => {
      const { contentType, body } = await deps.metrics.render();
      res.writeHead(200, { 'content-type': contentType });
      res.end(body);
    })
    .on('GET', '/v1/models', (req, res) => forwardModels(deps, req, res))
    .on('GET', '/instances', (_req, res) => {
      deps.pool.expire();
      sendJson(res, 200, {
        instances: deps.pool
          .all()
          .filter((b) => b.source === 'discovery')
          .map((b) => b.describe()),
      });
    });
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
