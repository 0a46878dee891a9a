/**
 * MoRIIO's kv_transfer_params (docs/proxy.md#moriio-moriioconnector--read-sequential-write-concurrent):
 * what the proxy sends P and D, what P answers in READ mode (the proxy copies part of it to
 * D), and how D reads where the prefill engine is.
 */
import { randomUUID } from 'node:crypto';
import type { KVTransferParams } from './kv-transfer-params.ts';
import { type MoRIIOZmqAddress, parseMoRIIORequestId } from './moriio-address.ts';
import { nonNegativeIntOr, portOf } from './values.ts';

/** One side's data-parallel and tensor-parallel layout, and the DP rank a request uses there. */
export interface MoRIIOPeerLayout {
  dpSize: number;
  tpSize: number;
  dpRank: number;
}

/** `tx-{uuid4}`: names one transfer on both engines. */
export function newMoRIIOTransferId(): string {
  return `tx-${randomUUID()}`;
}

/** What P receives: the decoder's DP/TP sizes and the transfer id. */
export function moriioPrefillParams(
  decode: Omit<MoRIIOPeerLayout, 'dpRank'>,
  transferId: string,
): KVTransferParams {
  return {
    remote_dp_size: decode.dpSize,
    remote_tp_size: decode.tpSize,
    transfer_id: transferId,
    do_remote_decode: true,
    do_remote_prefill: false,
    remote_engine_id: null,
    remote_block_ids: null,
  };
}

/** The keys of P's answer the proxy copies into D's params in READ mode. */
const MORIIO_RELAYED_KEYS = ['remote_engine_id', 'remote_block_ids', 'transfer_id'] as const;

/**
 * What D receives. WRITE: sent before P answers, so no P block ids. READ: P's
 * MORIIO_RELAYED_KEYS are copied from P's answer.
 */
export function moriioDecodeParams(
  prefill: MoRIIOPeerLayout,
  transferId: string,
  prefillReturned: KVTransferParams | null,
): KVTransferParams {
  const params: KVTransferParams = {
    do_remote_decode: false,
    do_remote_prefill: true,
    remote_engine_id: null,
    remote_block_ids: null,
    transfer_id: transferId,
    remote_dp_size: prefill.dpSize,
    remote_tp_size: prefill.tpSize,
    remote_dp_rank: prefill.dpRank,
  };
  if (prefillReturned !== null) {
    for (const key of MORIIO_RELAYED_KEYS) {
      if (prefillReturned[key] !== undefined) params[key] = prefillReturned[key];
    }
  }
  return params;
}

/** P's answer when a do_remote_decode request finishes: its identity, address, layout and blocks. */
export function moriioPrefillResult(r: {
  engineId: string;
  address: MoRIIOZmqAddress;
  blockIds: number[];
  dpRank: number;
  dpSize: number;
  dpSizeLocal: number;
  tpSize: number;
  transferId: string;
}): KVTransferParams {
  return {
    do_remote_prefill: true,
    do_remote_decode: false,
    remote_block_ids: r.blockIds,
    remote_engine_id: r.engineId,
    remote_host: r.address.host,
    remote_handshake_port: r.address.handshakePort,
    remote_notify_port: r.address.notifyPort,
    remote_dp_rank: r.dpRank,
    remote_dp_rank_override: true,
    remote_dp_size: r.dpSize,
    remote_dp_size_local: r.dpSizeLocal,
    tp_size: r.tpSize,
    transfer_id: r.transferId,
  };
}

/** Where a consumer request's prefill engine is, as D reads it. */
export interface MoRIIOPrefillPeer {
  address: MoRIIOZmqAddress;
  /** The DP rank the request used on P. */
  dpRank: number;
  /** P's DP ranks on its node (for the port offset). */
  dpSizeLocal: number;
  tpSize: number;
}

/**
 * The prefill engine of a consumer request: its address from the proxy's request id first,
 * then from the explicit params (remote_host or remote_hosts[0], remote_handshake_port,
 * remote_notify_port). Null when neither names it; throws on a malformed embedded address.
 */
export function readMoRIIOPrefillPeer(requestId: string, params: KVTransferParams): MoRIIOPrefillPeer | null {
  const address = parseMoRIIORequestId(requestId)?.prefill ?? explicitAddress(params);
  if (!address) return null;
  return {
    address,
    dpRank: nonNegativeIntOr(params['remote_dp_rank'], 0),
    dpSizeLocal: nonNegativeIntOr(
      params['remote_dp_size_local'],
      nonNegativeIntOr(params['remote_dp_size'], 1),
    ),
    tpSize: Math.max(1, nonNegativeIntOr(params['remote_tp_size'], nonNegativeIntOr(params['tp_size'], 1))),
  };
}

function explicitAddress(params: KVTransferParams): MoRIIOZmqAddress | null {
  const hosts = params['remote_hosts'];
  const host =
    typeof params['remote_host'] === 'string' && params['remote_host'] !== ''
      ? params['remote_host']
      : Array.isArray(hosts) && typeof hosts[0] === 'string'
        ? hosts[0]
        : null;
  const handshakePort = portOf(params['remote_handshake_port']);
  const notifyPort = portOf(params['remote_notify_port']);
  if (host === null || handshakePort === null || notifyPort === null) return null;
  return { host, handshakePort, notifyPort };
}
