/**
 * The exact bodies and params of each P/D flow (docs/proxy.md#flows-and-their-exact-parameters).
 * Pure functions: given the client's body and the chosen backends, they return what each
 * leg sends, so tests can check every key.
 */
import { randomUUID } from 'node:crypto';

export type Json = Record<string, unknown>;

/** What P receives in NIXL pull and push: "prefill only, then keep the blocks for a decoder". */
export const NIXL_PREFILL_PARAMS: Readonly<Json> = Object.freeze({
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: null,
  remote_block_ids: null,
  remote_host: null,
  remote_port: null,
});

/**
 * The prefill leg's body: non-streaming, one token, one choice, no stream_options, no
 * min_tokens (the decode leg keeps all of these because it is sent the client's original
 * body). One choice: P answers with one choice's kv_transfer_params, so the blocks of any
 * other choice would stay pinned on P until their lease expired.
 */
export function prefillBody(body: Json, kvTransferParams: Json): Json {
  const out: Json = { ...body, kv_transfer_params: kvTransferParams, stream: false, max_tokens: 1 };
  if ('n' in body) out['n'] = 1;
  if ('max_completion_tokens' in body) out['max_completion_tokens'] = 1;
  delete out['stream_options'];
  delete out['min_tokens'];
  delete out['min_completion_tokens'];
  return out;
}

/** D in NIXL pull: the original body plus P's returned params (none → D recomputes). */
export function nixlPullDecodeBody(body: Json, prefillParams: Json | null): Json {
  if (prefillParams === null || Object.keys(prefillParams).length === 0) return { ...body };
  return { ...body, kv_transfer_params: prefillParams };
}

export interface PushTarget {
  engineId: string;
  host: string;
  port: number;
  tpSize: number;
  ppSize: number;
}

/** D in NIXL push: P's side-channel coordinates and the shared request id, no block ids. */
export function nixlPushDecodeParams(target: PushTarget, requestId: string): Json {
  return {
    do_remote_decode: false,
    do_remote_prefill: true,
    remote_engine_id: target.engineId,
    remote_host: target.host,
    remote_port: target.port,
    tp_size: target.tpSize,
    pp_size: target.ppSize,
    remote_request_id: requestId,
  };
}

/** `host:{ip},handshake:{port},notify:{port}` — MoRIIO's peer address format. */
export function moriioZmqAddress(host: string, handshakePort: number, notifyPort: number): string {
  return `host:${host},handshake:${handshakePort},notify:${notifyPort}`;
}

/**
 * The request id MoRIIO engines parse both peers' addresses out of
 * (docs/connectors/moriio.md#addressing-the-peer).
 */
export function moriioRequestId(prefillZmq: string, decodeZmq: string, uuidHex = newUuidHex()): string {
  return `___prefill_addr_${prefillZmq}___decode_addr_${decodeZmq}_${uuidHex}`;
}

export function newUuidHex(): string {
  return randomUUID().replaceAll('-', '');
}

export function newTransferId(): string {
  return `tx-${randomUUID()}`;
}

export interface MoriioPeer {
  dpSize: number;
  tpSize: number;
  dpRank: number;
}

/** What P receives in MoRIIO: the decoder's DP/TP sizes and the transfer id. */
export function moriioPrefillParams(decode: MoriioPeer, transferId: string): Json {
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

/**
 * What D receives in MoRIIO. WRITE: sent before P answers, so no P block ids. READ: P's
 * remote_engine_id / remote_block_ids / transfer_id are copied from P's response.
 */
export function moriioDecodeParams(
  prefill: MoriioPeer,
  transferId: string,
  prefillReturned: Json | null,
): Json {
  const params: Json = {
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
    for (const key of ['remote_engine_id', 'remote_block_ids', 'transfer_id'] as const) {
      if (prefillReturned[key] !== undefined) params[key] = prefillReturned[key];
    }
  }
  return params;
}

/** vLLM's MoRIIO toy proxy asks D for one token less (the optional compatibility quirk). */
export function decrementMaxTokens(body: Json): Json {
  const out = { ...body };
  for (const key of ['max_completion_tokens', 'max_tokens'] as const) {
    const v = out[key];
    if (typeof v === 'number' && v > 1) out[key] = v - 1;
  }
  return out;
}
