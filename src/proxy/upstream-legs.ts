/**
 * The proxy's upstream legs: one POST to a backend (a refused connection marks it down at
 * once, an answer marks it up), and a backend's error relayed to the client as it came.
 */
import type { ServerResponse } from 'node:http';
import { type ErrorCode, type ErrorJson, errorTypeOfStatus } from '../errors/index.ts';
import { sendJson } from '../http/index.ts';
import { getLogger } from '../logging/logger.ts';
import type { Backend } from './backend.ts';
import type { BackendPool } from './backend-pool.ts';
import type { RoutingPolicy } from './policies.ts';
import { upstreamUnreachable } from './proxy-errors.ts';
import type { ProxyMetrics } from './proxy-metrics.ts';
import type { Json } from './request-shaping.ts';
import type { InfoListener, Upstream, UpstreamResponse } from './upstream.ts';

const log = getLogger('kvconnect.proxy.upstream-legs');

export interface LegDeps {
  pool: BackendPool;
  policy: RoutingPolicy;
  upstream: Upstream;
  metrics: ProxyMetrics;
}

function isConnectError(e: unknown): boolean {
  const code = (e as { code?: unknown })?.code;
  return (
    code === 'ECONNREFUSED' || code === 'UND_ERR_SOCKET' || code === 'ECONNRESET' || code === 'EHOSTUNREACH'
  );
}

/** One upstream leg; a refused connection marks the backend down at once. */
export async function sendLeg(
  deps: LegDeps,
  url: string,
  backend: Backend,
  body: Json,
  headers: Record<string, string>,
  signal: AbortSignal,
  clientSignal: AbortSignal,
  onInfo?: InfoListener,
): Promise<UpstreamResponse> {
  try {
    const res = await deps.upstream.postJson(url, body, headers, signal, onInfo);
    backend.answeredAt = Date.now();
    // It answered: a backend marked down is back (a restart), whatever its last health check said.
    if (res.status < 500) deps.pool.markUp(backend);
    return res;
  } catch (e) {
    if (!signal.aborted && isConnectError(e)) deps.pool.markDown(backend, String((e as Error).message));
    throw clientSignal.aborted ? e : upstreamUnreachable(backend.role, backend.url, e);
  }
}

/**
 * The backend's error status and JSON body reach the client as they are; a body that is not
 * JSON is wrapped in vLLM's error body (`code` the status, ours in `kvconnect_code`).
 */
export function relayError(res: ServerResponse, status: number, text: string, backend: Backend): void {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = {
      error: {
        message: text || `HTTP ${status}`,
        type: errorTypeOfStatus(status),
        param: null,
        code: status,
        kvconnect_code: 'PROXY_UPSTREAM_ERROR' satisfies ErrorCode,
      },
    } satisfies ErrorJson;
  }
  log.warn('%s instance %s answered %d', backend.role, backend.url, status);
  sendJson(res, status, json);
}
