/**
 * The OffloadingConnector p2p flow (docs/proxy.md#offloading-p2p-offloadingconnector--concurrent),
 * as llm-d's routing sidecar drives it with `--kv-connector=offloading`: one kv_request_id per
 * request; P gets `{"remote_decoder": {kv_request_id}}`, D gets `{"remote_prefiller":
 * {kv_request_id, remote_host, remote_port}}` naming P's p2p control socket, and both legs are
 * sent at once (D's fetch waits on P for the blocks P has not computed yet). A request with
 * the `x-kv-cache-source-host-port` header (llm-d's EPP names a peer that holds more of the
 * prefix) also gets `remote_kv_source` on P's leg, so P pulls that prefix instead of computing it.
 */
import { randomUUID } from 'node:crypto';
import { KVError } from '../errors/index.ts';
import { getLogger } from '../logging/logger.ts';
import { formatP2PParams, type P2PSource } from '../wire/index.ts';
import type { Backend } from './backend.ts';
import type { FlowPlan, PlanInput } from './flow-plan.ts';
import { type Json, prefillBody } from './request-shaping.ts';

const log = getLogger('kvconnect.proxy.offloading-flow');

/** llm-d's header: the serving host:port of a peer that holds the request's prefix in its CPU tier. */
export const KV_CACHE_SOURCE_HEADER = 'x-kv-cache-source-host-port';

/**
 * A backend's p2p control socket: what its GET /kvconnect/info advertises (p2p_host,
 * p2p_port), else its host and `--p2p-connector-port`; null when neither is known.
 * `rank` is added to the base port (a data-parallel backend binds base + rank).
 */
export function p2pAddressOf(
  backend: Backend,
  basePort: number | undefined,
  rank = 0,
): { host: string; port: number } | null {
  const host = backend.info?.p2p_host ?? backend.host;
  const base = basePort ?? backend.info?.p2p_base_port;
  return base === undefined ? null : { host, port: base + rank };
}

/**
 * The peer named by the x-kv-cache-source-host-port header, as a p2p address: the backend
 * serving at that host:port (its advertised p2p socket), else that host with
 * `--p2p-connector-port`. A malformed or unresolvable header is ignored with a warning, as
 * llm-d's sidecar ignores it.
 */
export function kvCacheSourceOf(
  header: string | undefined,
  backends: readonly Backend[],
  basePort: number | undefined,
): { host: string; port: number } | null {
  if (header === undefined || header === '') return null;
  const m = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(header.trim());
  if (!m) {
    log.warnOnce('ignoring %s %s: expected host:port', KV_CACHE_SOURCE_HEADER, JSON.stringify(header));
    return null;
  }
  const host = (m[1] as string).replace(/^\[|\]$/g, '');
  const port = Number(m[2]);
  const peer = backends.find((b) => {
    const u = new URL(b.url);
    return b.host === host && Number(u.port || (u.protocol === 'https:' ? 443 : 80)) === port;
  });
  const address = peer
    ? p2pAddressOf(peer, basePort)
    : basePort === undefined
      ? null
      : { host, port: basePort };
  if (!address) {
    log.warnOnce(
      'ignoring %s %s: no p2p port known for that peer (pass --p2p-connector-port or route to a kvconnect server)',
      KV_CACHE_SOURCE_HEADER,
      header,
    );
  }
  return address;
}

export function planOffloading(input: PlanInput): FlowPlan {
  const { body, prefill } = input;
  const rank = prefill.dpSize > 1 ? prefill.nextDpRank() : null;
  const address = p2pAddressOf(prefill, input.p2pConnectorPort, rank ?? 0);
  if (!address) {
    throw new KVError(
      'PROXY_CONNECTOR_UNSUPPORTED',
      `The prefill instance ${prefill.url} runs OffloadingConnector but advertises no p2p tier (p2p_host/p2p_base_port in GET /kvconnect/info)`,
      {
        hint: 'Give the OffloadingConnector a {"type": "p2p"} secondary tier (TieringOffloadingSpec), or pass --p2p-connector-port with the port its p2p tier binds.',
      },
    );
  }
  // The transaction id both engines use; the proxy's request id when the client gave none.
  const kvRequestId = input.requestId || randomUUID();
  const source: P2PSource = { kvRequestId, ...address };
  const pull = input.kvCacheSource ? { kvRequestId: `${kvRequestId}-src`, ...input.kvCacheSource } : null;
  const prefillParams = formatP2PParams({ decoder: { kvRequestId }, prefiller: null, kvSource: pull });
  const headers = { 'x-request-id': input.requestId };
  return {
    connector: 'OffloadingConnector',
    requestId: input.requestId,
    prefillBody: prefillBody(body, prefillParams),
    prefillHeaders: rank === null ? headers : { ...headers, 'x-data-parallel-rank': String(rank) },
    decodeHeaders: headers,
    concurrent: true,
    decodeBody: () => ({
      ...body,
      kv_transfer_params: formatP2PParams({ decoder: null, prefiller: source, kvSource: null }),
    }),
  };
}

/**
 * NIXL P/D on engines that also run the OffloadingConnector's p2p tier (a MultiConnector of
 * NixlConnector and OffloadingConnector; llm-d's `nixlv2` with `--enable-p2p-pull`): with a
 * source peer named, P's leg also gets `remote_kv_source`, so P pulls the cached prefix over
 * the p2p tier while NIXL moves the prompt to D. Only when P has a p2p tier (it advertises
 * `p2p_base_port`, or `--p2p-connector-port` is given); otherwise the header is ignored.
 */
export function withSourcePull(plan: FlowPlan, input: PlanInput): FlowPlan {
  const src = input.kvCacheSource;
  if (!src) return plan;
  const prefillBody = withPull(plan.prefillBody, plan.requestId, src, input.prefill, input.p2pConnectorPort);
  return prefillBody === plan.prefillBody ? plan : { ...plan, prefillBody };
}

/**
 * A request served by a decode instance alone (no prefill instance, or the fallback to local
 * prefill): with a source peer named, its body gets `remote_kv_source` alone, as llm-d's
 * sidecar sends a decoder-only request, so the decode instance pulls the cached prefix over
 * its p2p tier instead of computing it. Unchanged when the instance has no p2p tier.
 */
export function withDecodeOnlySourcePull(
  body: Json,
  requestId: string,
  src: { host: string; port: number } | null,
  decode: Backend,
  p2pConnectorPort: number | undefined,
): Json {
  return src ? withPull(body, requestId, src, decode, p2pConnectorPort) : body;
}

/** `body` with `remote_kv_source` added to its kv_transfer_params, if `backend` has a p2p tier. */
function withPull(
  body: Json,
  requestId: string,
  src: { host: string; port: number },
  backend: Backend,
  p2pConnectorPort: number | undefined,
): Json {
  if (backend.info?.p2p_base_port === undefined && p2pConnectorPort === undefined) {
    log.warnOnce(
      'ignoring %s: %s has no p2p tier (give its OffloadingConnector a p2p secondary tier, alone or next to NixlConnector in a MultiConnector)',
      KV_CACHE_SOURCE_HEADER,
      backend.url,
    );
    return body;
  }
  const params = (body['kv_transfer_params'] ?? {}) as Record<string, unknown>;
  const pull = formatP2PParams({
    decoder: null,
    prefiller: null,
    kvSource: { kvRequestId: `${requestId || randomUUID()}-src`, ...src },
  });
  return { ...body, kv_transfer_params: { ...params, ...pull } };
}
