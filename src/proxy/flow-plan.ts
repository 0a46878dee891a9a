/**
 * Plans one disaggregated request: which params each leg sends, which request id goes in
 * X-Request-Id, and whether the legs run one after the other or concurrently.
 */
import { getLogger } from '../logging/logger.ts';
import type { Backend } from './backend.ts';
import { pushCoordinatesMissing } from './proxy-errors.ts';
import {
  decrementMaxTokens,
  type Json,
  moriioDecodeParams,
  moriioPrefillParams,
  moriioRequestId,
  moriioZmqAddress,
  NIXL_PREFILL_PARAMS,
  newTransferId,
  nixlPullDecodeBody,
  nixlPushDecodeParams,
  prefillBody,
} from './request-shaping.ts';
import type { ConnectorKind, MoriioMode, PushCoordinates } from './types.ts';

const log = getLogger('kvconnect.proxy.flow-plan');

const MORIIO_DEFAULT_HANDSHAKE_PORT = 6301;
const MORIIO_DEFAULT_NOTIFY_PORT = 61005;

export interface FlowPlan {
  connector: ConnectorKind;
  requestId: string;
  prefillBody: Json;
  prefillHeaders: Record<string, string>;
  decodeHeaders: Record<string, string>;
  /** true: D is sent together with P (NIXL push, MoRIIO WRITE); false: after P answered. */
  concurrent: boolean;
  /** D's body; called with P's returned kv_transfer_params, or null for concurrent flows. */
  decodeBody(prefillParams: Json | null): Json;
}

export interface PlanInput {
  connector: ConnectorKind;
  body: Json;
  prefill: Backend;
  decode: Backend;
  /** The client's X-Request-Id, or a fresh uuid. */
  requestId: string;
  push: PushCoordinates;
  moriioMode: MoriioMode | undefined;
  moriioDecrementMaxTokens: boolean;
}

export function planFlow(input: PlanInput): FlowPlan {
  switch (input.connector) {
    case 'NixlConnector':
      return planNixlPull(input);
    case 'NixlPushConnector':
      return planNixlPush(input);
    case 'MoRIIOConnector':
      return planMoriio(input);
  }
}

function planNixlPull({ body, requestId }: PlanInput): FlowPlan {
  const headers = { 'x-request-id': requestId };
  return {
    connector: 'NixlConnector',
    requestId,
    prefillBody: prefillBody(body, { ...NIXL_PREFILL_PARAMS }),
    prefillHeaders: headers,
    decodeHeaders: headers,
    concurrent: false,
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
    prefillBody: prefillBody(body, { ...NIXL_PREFILL_PARAMS }),
    prefillHeaders: headers,
    decodeHeaders: headers,
    concurrent: true,
    decodeBody: () => ({ ...body, kv_transfer_params: decodeParams }),
  };
}

/** A backend's MoRIIO address: its discovery ping, its /kvconnect/info, or vLLM's default ports. */
export function zmqAddressOf(backend: Backend): string {
  const known = backend.registration?.zmqAddress ?? backend.info?.zmq_address;
  if (known !== undefined) return known;
  log.warnOnce(
    'no MoRIIO zmq address known for %s; assuming handshake port %d and notify port %d',
    backend.url,
    MORIIO_DEFAULT_HANDSHAKE_PORT,
    MORIIO_DEFAULT_NOTIFY_PORT,
  );
  return moriioZmqAddress(backend.host, MORIIO_DEFAULT_HANDSHAKE_PORT, MORIIO_DEFAULT_NOTIFY_PORT);
}

export function moriioModeOf(backend: Backend, forced: MoriioMode | undefined): MoriioMode {
  if (forced !== undefined) return forced;
  const reported = backend.registration?.transferMode ?? backend.info?.transfer_mode;
  return typeof reported === 'string' && reported.toUpperCase() === 'READ' ? 'READ' : 'WRITE';
}

function planMoriio(input: PlanInput): FlowPlan {
  const { body, prefill, decode } = input;
  const mode = moriioModeOf(prefill, input.moriioMode);
  const requestId = moriioRequestId(zmqAddressOf(prefill), zmqAddressOf(decode));
  const transferId = newTransferId();
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
