/**
 * The proxy's upstream legs: one POST to a backend (a refused connection marks it down at
 * once), the relay of a backend's answer to the client, and the plain request a decode
 * server serves alone (the prefill fallback).
 */
import type { ServerResponse } from 'node:http';
import type { ErrorCode } from '../errors/index.ts';
import { sendJson, writeChunk } from '../http/index.ts';
import { getLogger } from '../logging/logger.ts';
import type { Backend } from './backend.ts';
import type { BackendPool } from './backend-pool.ts';
import type { RouteContext, RoutingPolicy } from './policies.ts';
import { noBackend, upstreamUnreachable } from './proxy-errors.ts';
import type { FallbackReason, ProxyMetrics } from './proxy-metrics.ts';
import type { Json } from './request-shaping.ts';
import type { Upstream, UpstreamResponse } from './upstream.ts';

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
): Promise<UpstreamResponse> {
  try {
    const res = await deps.upstream.postJson(url, body, headers, signal);
    backend.answeredAt = Date.now();
    return res;
  } catch (e) {
    if (!signal.aborted && isConnectError(e)) deps.pool.markDown(backend, String((e as Error).message));
    throw clientSignal.aborted ? e : upstreamUnreachable(backend.role, backend.url, e);
  }
}

export interface PlainRequest {
  path: string;
  body: Json;
  requestId: string;
  headers: Record<string, string>;
  ctx: RouteContext;
  signal: AbortSignal;
  res: ServerResponse;
}

/** The request as the client sent it, to one decode instance, which prefills it itself. */
export async function serveOnDecode(
  deps: LegDeps,
  r: PlainRequest,
  reason: FallbackReason | null,
  why: string,
): Promise<void> {
  const decodes = deps.pool.healthy('decode');
  if (decodes.length === 0) throw noBackend('decode');
  const decode = deps.policy.select('decode', decodes, r.ctx);
  deps.metrics.requests.inc({ flow: 'decode_only' });
  if (reason !== null) {
    deps.metrics.fallbacks.inc({ reason });
    log.warn('request %s served by decode %s alone (local prefill): %s', r.requestId, decode.url, why);
  }
  decode.inFlight += 1;
  try {
    const up = await sendLeg(
      deps,
      `${decode.url}${r.path}`,
      decode,
      r.body,
      { ...r.headers, 'x-request-id': r.requestId },
      r.signal,
      r.signal,
    );
    await relay(r.res, up, r.requestId);
  } catch (e) {
    if (r.signal.aborted && r.res.destroyed) return;
    throw e;
  } finally {
    decode.inFlight -= 1;
  }
}

/** The backend's error status and JSON body reach the client as they are. */
export function relayError(res: ServerResponse, status: number, text: string, backend: Backend): void {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = {
      error: {
        message: text || `HTTP ${status}`,
        type: 'UpstreamError',
        code: 'PROXY_UPSTREAM_ERROR' satisfies ErrorCode,
      },
    };
  }
  log.warn('%s instance %s answered %d', backend.role, backend.url, status);
  sendJson(res, status, json);
}

/** Streams D's response to the client without buffering (SSE or JSON alike). */
export async function relay(res: ServerResponse, up: UpstreamResponse, requestId: string): Promise<void> {
  const contentType = up.headers['content-type'];
  res.writeHead(up.status, {
    'content-type': typeof contentType === 'string' ? contentType : 'application/json',
    'x-request-id': requestId,
    ...(String(contentType).startsWith('text/event-stream') ? { 'cache-control': 'no-cache' } : {}),
  });
  res.flushHeaders();
  for await (const chunk of up.body as AsyncIterable<Uint8Array>) {
    if (res.destroyed) break;
    await writeChunk(res, chunk);
  }
  res.end();
}
