/**
 * One client completion through the proxy: pick P and D, plan the flow for the connector,
 * run the legs (sequential or concurrent), and pass D's response through chunk by chunk.
 * A client that disconnects aborts whatever legs are still open.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ErrorCode } from '../errors/index.ts';
import { headerValue, readJson, sendJson, writeChunk } from '../http/index.ts';
import { getLogger } from '../logging/logger.ts';
import type { Backend } from './backend.ts';
import type { BackendPool } from './backend-pool.ts';
import { planFlow } from './flow-plan.ts';
import type { RoutingPolicy } from './policies.ts';
import { chainedPrefixHashes, promptText } from './prefix-hash.ts';
import {
  badRequest,
  noBackend,
  proxyBodyRules,
  upstreamBadResponse,
  upstreamUnreachable,
} from './proxy-errors.ts';
import type { Json } from './request-shaping.ts';
import { CONNECTOR_KINDS, type ConnectorKind, type ProxyOptions } from './types.ts';
import type { Upstream, UpstreamResponse } from './upstream.ts';

const log = getLogger('proxy');

export interface HandlerDeps {
  pool: BackendPool;
  policy: RoutingPolicy;
  upstream: Upstream;
  options: ProxyOptions;
}

function connectorOf(backend: Backend): ConnectorKind {
  const c = backend.info?.connector;
  return (CONNECTOR_KINDS as readonly string[]).includes(c ?? '') ? (c as ConnectorKind) : 'NixlConnector';
}

const MAX_BODY_BYTES = 64 * 1024 * 1024;

async function parseClientBody(req: IncomingMessage): Promise<Json> {
  const body = await readJson(req, proxyBodyRules(MAX_BODY_BYTES));
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw badRequest('The request body must be a JSON object');
  }
  return body as Json;
}

/**
 * Nothing listens there: the backend is down. A reset or closed socket is not evidence of
 * that (a busy server can drop one connection), so those are left to the health checks.
 */
function isConnectError(e: unknown): boolean {
  const code = (e as { code?: unknown })?.code;
  return code === 'ECONNREFUSED' || code === 'EHOSTUNREACH';
}

export async function handleCompletion(
  deps: HandlerDeps,
  path: string,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const { pool, policy, upstream, options } = deps;
  const abort = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) abort.abort(new Error('client disconnected'));
  });

  const body = await parseClientBody(req);
  const prefills = pool.healthy('prefill');
  if (prefills.length === 0) throw noBackend('prefill');
  const decodes = pool.healthy('decode');
  if (decodes.length === 0) throw noBackend('decode');
  const ctx = {
    prefixHashes: policy.needsPrefixHashes
      ? chainedPrefixHashes(promptText(body), options.prefixChunkBytes)
      : [],
  };
  const prefill = policy.select('prefill', prefills, ctx);
  const decode = policy.select('decode', decodes, ctx);
  const connector = options.kvConnector ?? connectorOf(prefill);
  if (options.kvConnector === undefined && connectorOf(decode) !== connector) {
    log.warnOnce(
      'prefill %s runs %s but decode %s runs %s; using the prefill flow',
      prefill.url,
      connector,
      decode.url,
      connectorOf(decode),
    );
  }
  const plan = planFlow({
    connector,
    body,
    prefill,
    decode,
    requestId: headerValue(req, 'x-request-id') ?? randomUUID(),
    push: options.push,
    moriioMode: options.moriioMode,
    moriioDecrementMaxTokens: options.moriioDecrementMaxTokens,
  });

  const auth = headerValue(req, 'authorization') ?? bearerFromEnv();
  const extra: Record<string, string> = auth === undefined ? {} : { authorization: auth };
  const send = async (
    backend: Backend,
    legBody: Json,
    headers: Record<string, string>,
  ): Promise<UpstreamResponse> => {
    try {
      const res = await upstream.postJson(
        `${backend.url}${path}`,
        legBody,
        { ...extra, ...headers },
        abort.signal,
      );
      backend.answeredAt = Date.now();
      return res;
    } catch (e) {
      if (!abort.signal.aborted && isConnectError(e)) pool.markDown(backend, String((e as Error).message));
      throw abort.signal.aborted ? e : upstreamUnreachable(backend.role, backend.url, e);
    }
  };

  prefill.inFlight += 1;
  decode.inFlight += 1;
  let decodeLeg: Promise<UpstreamResponse> | null = null;
  try {
    if (plan.concurrent) {
      decodeLeg = send(decode, plan.decodeBody(null), plan.decodeHeaders);
      decodeLeg.catch(() => undefined);
    }
    const pRes = await send(prefill, plan.prefillBody, plan.prefillHeaders);
    const pText = await pRes.body.text();
    if (pRes.status !== 200) {
      abort.abort(new Error('prefill failed'));
      relayError(res, pRes.status, pText, prefill);
      return;
    }
    let pJson: unknown;
    try {
      pJson = JSON.parse(pText);
    } catch {
      abort.abort(new Error('prefill failed'));
      throw upstreamBadResponse('prefill', prefill.url, 'the body is not JSON');
    }
    const returned = (pJson as { kv_transfer_params?: unknown } | null)?.kv_transfer_params;
    const prefillParams = typeof returned === 'object' && returned !== null ? (returned as Json) : null;
    if (prefillParams === null && !plan.concurrent) {
      log.warnOnce(
        'prefill %s returned no kv_transfer_params; decode will recompute the prompt',
        prefill.url,
      );
    }
    decodeLeg ??= send(decode, plan.decodeBody(prefillParams), plan.decodeHeaders);
    const dRes = await decodeLeg;
    await relay(res, dRes, plan.requestId);
  } catch (e) {
    if (abort.signal.aborted && res.destroyed) return; // the client left; nothing to answer
    throw e;
  } finally {
    prefill.inFlight -= 1;
    decode.inFlight -= 1;
  }
}

function bearerFromEnv(): string | undefined {
  const key = process.env['OPENAI_API_KEY'];
  return key ? `Bearer ${key}` : undefined;
}

/** The backend's error status and JSON body reach the client as they are. */
function relayError(res: ServerResponse, status: number, text: string, backend: Backend): void {
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
async function relay(res: ServerResponse, up: UpstreamResponse, requestId: string): Promise<void> {
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
