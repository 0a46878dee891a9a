/**
 * One client completion through the proxy: pick P and D, plan the flow for the connector,
 * run the legs (sequential or concurrent), and pass D's response through chunk by chunk.
 * A client that disconnects aborts whatever legs are still open.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { KVError } from '../errors/index.ts';
import { headerValue, readJson } from '../http/index.ts';
import { getLogger } from '../logging/logger.ts';
import { readEnv } from '../util/envs.ts';
import type { Backend } from './backend.ts';
import type { BackendPool } from './backend-pool.ts';
import { planFlow } from './flow-plan.ts';
import type { RoutingPolicy } from './policies.ts';
import { chainedPrefixHashes, promptText } from './prefix-hash.ts';
import { badRequest, noBackend, proxyBodyRules, upstreamBadResponse } from './proxy-errors.ts';
import type { FallbackReason, ProxyMetrics } from './proxy-metrics.ts';
import type { Json } from './request-shaping.ts';
import type { ProxyOptions } from './types.ts';
import type { Upstream, UpstreamResponse } from './upstream.ts';
import { relay, relayError, sendLeg, serveOnDecode } from './upstream-legs.ts';

const log = getLogger('kvconnect.proxy.disagg-handler');

export interface HandlerDeps {
  pool: BackendPool;
  policy: RoutingPolicy;
  upstream: Upstream;
  options: ProxyOptions;
  metrics: ProxyMetrics;
}

/**
 * The connector a backend reported. Until its /kvconnect/info has been read it is taken to run
 * vLLM's default, NixlConnector; a connector without a P/D flow is refused by planFlow.
 */
function connectorOf(backend: Backend): string {
  return backend.info?.connector ?? 'NixlConnector';
}

const MAX_BODY_BYTES = 64 * 1024 * 1024;

async function parseClientBody(req: IncomingMessage): Promise<Json> {
  const body = await readJson(req, proxyBodyRules(MAX_BODY_BYTES));
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw badRequest('The request body must be a JSON object');
  }
  return body as Json;
}

export async function handleCompletion(
  deps: HandlerDeps,
  path: string,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const { pool, policy, options } = deps;
  const abort = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) abort.abort(new Error('client disconnected'));
  });

  const body = await parseClientBody(req);
  const prefills = pool.healthy('prefill');
  if (prefills.length === 0 && !options.prefillFallback) throw noBackend('prefill');
  const decodes = pool.healthy('decode');
  if (decodes.length === 0) throw noBackend('decode');
  const ctx = {
    prefixHashes: policy.needsPrefixHashes
      ? chainedPrefixHashes(promptText(body), options.prefixChunkBytes)
      : [],
    body,
  };
  const requestId = headerValue(req, 'x-request-id') ?? randomUUID();
  const auth = headerValue(req, 'authorization') ?? bearerFromEnv();
  const extra: Record<string, string> = auth === undefined ? {} : { authorization: auth };
  const fallback = (reason: FallbackReason | null, why: string): Promise<void> =>
    serveOnDecode(
      deps,
      { path, body, requestId, headers: extra, ctx, signal: abort.signal, res },
      reason,
      why,
    );
  if (prefills.length === 0) {
    // No prefill instance at all is a deployment without disaggregation, not a fallback.
    const none = pool.all('prefill').length === 0;
    await fallback(none ? null : 'no_prefill', 'no healthy prefill instance');
    return;
  }
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
    requestId,
    push: options.push,
    moriioMode: options.moriioMode,
    moriioDecrementMaxTokens: options.moriioDecrementMaxTokens,
  });

  const send = (
    backend: Backend,
    legBody: Json,
    headers: Record<string, string>,
    signal: AbortSignal = abort.signal,
  ): Promise<UpstreamResponse> =>
    sendLeg(deps, `${backend.url}${path}`, backend, legBody, { ...extra, ...headers }, signal, abort.signal);

  prefill.inFlight += 1;
  decode.inFlight += 1;
  let decodeLeg: Promise<UpstreamResponse> | null = null;
  // The prefill leg, and a decode leg sent with it, can be given up alone (fallback).
  const prefillAbort = new AbortController();
  const decodeAbort = new AbortController();
  let failure: { reason: FallbackReason; why: string } | null = null;
  try {
    if (plan.concurrent) {
      decodeLeg = send(
        decode,
        plan.decodeBody(null),
        plan.decodeHeaders,
        AbortSignal.any([abort.signal, decodeAbort.signal]),
      );
      decodeLeg.catch(() => undefined);
    }
    const prefillSignal = AbortSignal.any([
      abort.signal,
      prefillAbort.signal,
      AbortSignal.timeout(options.prefillTimeoutMs),
    ]);
    let pJson: unknown;
    try {
      const pRes = await send(prefill, plan.prefillBody, plan.prefillHeaders, prefillSignal);
      const pText = await pRes.body.text();
      if (pRes.status >= 500 && options.prefillFallback) {
        failure = { reason: 'status', why: `answered ${pRes.status}` };
      } else if (pRes.status !== 200) {
        abort.abort(new Error('prefill failed'));
        relayError(res, pRes.status, pText, prefill);
        return;
      } else {
        try {
          pJson = JSON.parse(pText);
        } catch {
          if (!options.prefillFallback) {
            abort.abort(new Error('prefill failed'));
            throw upstreamBadResponse('prefill', prefill.url, 'the body is not JSON');
          }
          failure = { reason: 'bad_response', why: 'sent a body that is not JSON' };
        }
      }
    } catch (e) {
      if (
        abort.signal.aborted ||
        !options.prefillFallback ||
        (e instanceof KVError && e.code === 'PROXY_UPSTREAM_BAD_RESPONSE')
      )
        throw e;
      const timedOut = prefillSignal.aborted && !abort.signal.aborted;
      failure = timedOut
        ? { reason: 'timeout', why: `no answer within ${options.prefillTimeoutMs} ms` }
        : { reason: 'connect', why: (e as Error).message };
    }
    if (failure) {
      prefillAbort.abort(new Error('prefill given up'));
      decodeAbort.abort(new Error('prefill failed'));
      log.warn('prefill %s failed for request %s (%s)', prefill.url, requestId, failure.why);
      await fallback(failure.reason, `prefill ${prefill.url} ${failure.why}`);
      return;
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
    deps.metrics.requests.inc({ flow: 'disaggregated' });
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
  const key = readEnv('OPENAI_API_KEY');
  return key ? `Bearer ${key}` : undefined;
}
