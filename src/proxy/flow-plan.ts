/**
 * Plans one disaggregated request: which params each leg sends (src/wire/'s shapes), which
 * request id goes in X-Request-Id, and whether the legs run one after the other or
 * concurrently. A connector without a P/D flow here is refused, never given another's flow.
 */
import { getLogger } from '../logging/logger.ts';
import {
  formatMoRIIORequestId,
  isPdConnector,
  MORIIO_DEFAULT_HANDSHAKE_PORT,
  MORIIO_DEFAULT_NOTIFY_PORT,
  type MoRIIOTransferMode,
  type MoRIIOZmqAddress,
  moriioDecodeParams,
  moriioPrefillParams,
  NIXL_PREFILL_REQUEST,
  newMoRIIOTransferId,
  nixlPushDecodeParams,
  PARAMS_AHEAD_HEADER,
  type PdConnector,
  parseMoRIIOZmqAddress,
} from '../wire/index.ts';
import type { Backend } from './backend.ts';
import { turnPrefillParams } from './conversation-cache.ts';
import { planOffloading, withSourcePull } from './offloading-flow.ts';
import { connectorUnsupported, pushCoordinatesMissing } from './proxy-errors.ts';
import { decrementMaxTokens, type Json, nixlPullDecodeBody, prefillBody } from './request-shaping.ts';
import type { PushCoordinates } from './types.ts';

const log = getLogger('kvconnect.proxy.flow-plan');

export interface FlowPlan {
  connector: PdConnector;
  requestId: string;
  prefillBody: Json;
  prefillHeaders: Record<string, string>;
  decodeHeaders: Record<string, string>;
  /** true: D is sent together with P (NIXL push, MoRIIO WRITE); false: after P answered. */
  concurrent: boolean;
  /**
   * P is asked for its kv_transfer_params ahead (NIXL pull, docs/proxy.md#params-ahead): D is
   * sent when they come, during P's prefill, instead of after P answered.
   */
  paramsAhead?: boolean;
  /** D's body; called with P's returned kv_transfer_params, or null for concurrent flows. */
  decodeBody(prefillParams: Json | null): Json;
}

export interface PlanInput {
  /** The P/D protocol: --kv-connector, or what the prefill backend reports. */
  connector: string;
  body: Json;
  prefill: Backend;
  decode: Backend;
  /** The client's X-Request-Id, or a fresh uuid. */
  requestId: string;
  push: PushCoordinates;
  moriioMode: MoRIIOTransferMode | undefined;
  moriioDecrementMaxTokens: boolean;
  /** OffloadingConnector: the prefill engines' p2p base port (--p2p-connector-port), else /kvconnect/info's. */
  p2pConnectorPort?: number | undefined;
  /** OffloadingConnector: a peer that holds the prompt's prefix (x-kv-cache-source-host-port), pulled by P. */
  kvCacheSource?: { host: string; port: number } | null;
  /** NIXL pull, multi-turn: D's params of the conversation's previous turn (./conversation-cache.ts). */
  turnParams?: Json | null;
  /** NIXL pull: ask P for its params ahead (ProxyOptions.paramsAhead). */
  paramsAhead?: boolean;
}

/** Throws PROXY_CONNECTOR_UNSUPPORTED for a connector without a P/D flow. */
export function planFlow(input: PlanInput): FlowPlan {
  const { connector } = input;
  if (!isPdConnector(connector)) throw connectorUnsupported(input.prefill.url, connector);
  switch (connector) {
    case 'NixlConnector':
      return withSourcePull(planNixlPull(input), input);
    case 'NixlPushConnector':
      return withSourcePull(planNixlPush(input), input);
    case 'MoRIIOConnector':
      return planMoriio(input);
    case 'OffloadingConnector':
      return planOffloading(input);
  }
}

function planNixlPull({ body, requestId, turnParams, paramsAhead = false }: PlanInput): FlowPlan {
  const headers = { 'x-request-id': requestId };
  const params = turnParams ? turnPrefillParams(turnParams) : { ...NIXL_PREFILL_REQUEST };
  return {
    connector: 'NixlConnector',
    requestId,
    prefillBody: prefillBody(body, params),
    prefillHeaders: paramsAhead ? { ...headers, [PARAMS_AHEAD_HEADER]: '1' } : headers,
    decodeHeaders: headers,
    concurrent: false,
    paramsAhead,
    decodeBody: (params) => nixlPullDecodeBody(body, params),
  };
}

function planNixlPush({ body, requestId, prefill, push }: PlanInput): FlowPlan {
  const info = prefill.info;
  const target = {
    engineId: push.engineId ?? info?.engine_id,
    host: push.host ?? info?.side_channel_host ?? prefill.host,
    port: push.port ?? info?.side_channel_port,
    tpSize: push.tpSize ?? info?.tp_size ?? 1,
    ppSize: push.ppSize ?? info?.pp_size ?? 1,
  };
  const missing: string[] = [];
  if (target.engineId === undefined) missing.push('engine_id');
  if (target.port === undefined) missing.push('side_channel_port');
  if (target.engineId === undefined || target.port === undefined) {
    throw pushCoordinatesMissing(prefill.url, missing);
  }
  const decodeParams = nixlPushDecodeParams(
    { ...target, engineId: target.engineId, port: target.port },
    requestId,
  );
  const headers = { 'x-request-id': requestId };
  return {
    connector: 'NixlPushConnector',
    requestId,
    prefillBody: prefillBody(body, { ...NIXL_PREFILL_REQUEST }),
    prefillHeaders: headers,
    decodeHeaders: headers,
    concurrent: true,
    decodeBody: () => ({ ...body, kv_transfer_params: decodeParams }),
  };
}

/** A backend's MoRIIO address: its discovery ping, its /kvconnect/info, or vLLM's default ports. */
function zmqAddressOf(backend: Backend): MoRIIOZmqAddress {
  const reported = backend.info?.zmq_address;
  const known =
    backend.registration?.zmqAddress ??
    (reported === undefined ? undefined : parseMoRIIOZmqAddress(reported));
  if (known !== undefined) return known;
  log.warnOnce(
    'no MoRIIO zmq address known for %s; assuming handshake port %d and notify port %d',
    backend.url,
    MORIIO_DEFAULT_HANDSHAKE_PORT,
    MORIIO_DEFAULT_NOTIFY_PORT,
  );
  return {
    host: backend.host,
    handshakePort: MORIIO_DEFAULT_HANDSHAKE_PORT,
    notifyPort: MORIIO_DEFAULT_NOTIFY_PORT,
  };
}

function moriioModeOf(backend: Backend, forced: MoRIIOTransferMode | undefined): MoRIIOTransferMode {
  if (forced !== undefined) return forced;
  const reported = backend.registration?.transferMode ?? backend.info?.transfer_mode;
  return typeof reported === 'string' && reported.toUpperCase() === 'READ' ? 'READ' : 'WRITE';
}

function planMoriio(input: PlanInput): FlowPlan {
  const { body, prefill, decode } = input;
  const mode = moriioModeOf(prefill, input.moriioMode);
  const requestId = formatMoRIIORequestId(zmqAddressOf(prefill), zmqAddressOf(decode));
  const transferId = newMoRIIOTransferId();
  const pPeer = { dpSize: prefill.dpSize, tpSize: prefill.tpSize, dpRank: prefill.nextDpRank() };
  const dPeer = { dpSize: decode.dpSize, tpSize: decode.tpSize, dpRank: decode.nextDpRank() };
  const decodeBase = input.moriioDecrementMaxTokens ? decrementMaxTokens(body) : body;
  return {
    connector: 'MoRIIOConnector',
    requestId,
    prefillBody: prefillBody(body, moriioPrefillParams(dPeer, transferId)),
    prefillHeaders: { 'x-request-id': requestId, 'x-data-parallel-rank': String(pPeer.dpRank) },
    decodeHeaders: { 'x-request-id': requestId, 'x-data-parallel-rank': String(dPeer.dpRank) },
    concurrent: mode === 'WRITE',
    decodeBody: (params) => ({
      ...decodeBase,
      kv_transfer_params: moriioDecodeParams(pPeer, transferId, mode === 'READ' ? params : null),
    }),
  };
}
