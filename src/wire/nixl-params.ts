/**
 * NIXL's kv_transfer_params (docs/proxy.md#flows-and-their-exact-parameters): what the
 * proxy sends P, what P answers (the pull flow relays it to D unchanged), what the proxy
 * sends D in the push flow, and how D reads where P holds the KV.
 */
import type { KVTransferParams } from './kv-transfer-params.ts';

/** What P receives in NIXL pull and push: "prefill only, then keep the blocks for a decoder". */
export const NIXL_PREFILL_REQUEST: Readonly<KVTransferParams> = Object.freeze({
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: null,
  remote_block_ids: null,
  remote_host: null,
  remote_port: null,
});

/** Where D reaches the prefill engine: its engine id, side channel and tensor-parallel size. */
export interface NixlRemoteEngine {
  readonly engineId: string;
  readonly host: string;
  readonly port: number;
  readonly tpSize: number;
}

/** D's params: load this request's KV from the remote (prefill) engine. */
export type NixlRemotePrefillParams = {
  do_remote_prefill: true;
  do_remote_decode: false;
  remote_engine_id: string;
  remote_host: string;
  remote_port: number;
  tp_size: number;
  pp_size?: number;
  remote_request_id: string;
  /** One list per KV cache group; absent in the push flow (D registers its own blocks). */
  remote_block_ids?: number[][];
  /** Tokens P computed (0: P holds nothing for D). */
  remote_num_tokens?: number;
  remote_blocks_expiry_time?: null;
  transfer_mode?: 'pull' | 'push';
};

/**
 * D's answer with bidirectional_kv_xfer: D keeps the finished request's blocks until
 * `remote_blocks_expiry_time` (seconds on D's scheduler clock, the clock its side channel
 * reports) for a next turn's prefill to READ back; a proxy sends them to P with that turn.
 */
export type NixlDecodeCacheParams = Omit<
  NixlRemotePrefillParams,
  'do_remote_prefill' | 'do_remote_decode' | 'remote_blocks_expiry_time'
> & {
  do_remote_prefill: false;
  do_remote_decode: true;
  remote_blocks_expiry_time: number | null;
};

interface FinishedBlocks {
  remote: NixlRemoteEngine;
  requestId: string;
  blockIds: number[][];
  numTokens: number;
  mode: 'pull' | 'push';
}

/** P's answer when a do_remote_decode request finishes: where D finds its KV. */
export function nixlPrefillResult(r: FinishedBlocks): NixlRemotePrefillParams {
  return {
    do_remote_prefill: true,
    do_remote_decode: false,
    ...finishedBlocks(r),
    remote_blocks_expiry_time: null,
    transfer_mode: r.mode,
  };
}

/** D's answer (bidirectional) when a request finishes: where a next turn's prefill finds D's KV, and until when. */
export function nixlDecodeCacheResult(
  r: FinishedBlocks & { expiryTime: number | null },
): NixlDecodeCacheParams {
  return {
    do_remote_prefill: false,
    do_remote_decode: true,
    ...finishedBlocks(r),
    remote_blocks_expiry_time: r.expiryTime,
    transfer_mode: r.mode,
  };
}

/** The keys both answers share, in vLLM's order. */
function finishedBlocks(r: FinishedBlocks) {
  return {
    remote_block_ids: r.blockIds,
    remote_engine_id: r.remote.engineId,
    remote_request_id: r.requestId,
    remote_host: r.remote.host,
    remote_port: r.remote.port,
    tp_size: r.remote.tpSize,
    ...(r.mode === 'push' ? { pp_size: 1 } : {}),
    remote_num_tokens: r.numTokens,
  };
}

/** D in NIXL push: P's side-channel coordinates and the shared request id, no block ids. */
export function nixlPushDecodeParams(
  remote: NixlRemoteEngine & { ppSize: number },
  requestId: string,
): NixlRemotePrefillParams {
  return {
    do_remote_decode: false,
    do_remote_prefill: true,
    remote_engine_id: remote.engineId,
    remote_host: remote.host,
    remote_port: remote.port,
    tp_size: remote.tpSize,
    pp_size: remote.ppSize,
    remote_request_id: requestId,
  };
}

/** The remote engine named by `remote_engine_id`, `remote_host`, `remote_port`, `tp_size`; null when incomplete. */
export function readNixlRemote(p: KVTransferParams): NixlRemoteEngine | null {
  const engineId = p['remote_engine_id'];
  const host = p['remote_host'];
  const port = Number(p['remote_port']);
  const tp = p['tp_size'] === undefined || p['tp_size'] === null ? 1 : Number(p['tp_size']);
  if (typeof engineId !== 'string' || engineId === '' || typeof host !== 'string' || host === '') return null;
  if (!Number.isInteger(port) || port <= 0 || port > 65535 || !Number.isInteger(tp) || tp < 1) return null;
  return { engineId, host, port, tpSize: tp };
}

/** `remote_blocks_expiry_time` when it is a finite number (seconds on the remote engine's clock). */
export function readBlocksExpiryTime(p: KVTransferParams): number | null {
  const t = p['remote_blocks_expiry_time'];
  return typeof t === 'number' && Number.isFinite(t) ? t : null;
}

/** `remote_num_tokens` when it is a positive integer. */
export function readRemoteNumTokens(p: KVTransferParams): number | null {
  const n = p['remote_num_tokens'];
  return typeof n === 'number' && Number.isInteger(n) && n > 0 ? n : null;
}
