/**
 * Where a MoRIIO peer lives (docs/connectors/moriio.md#addressing-the-peer): parsed out of
 * the proxy's request id (`___prefill_addr_{zmq}___decode_addr_{zmq}_{32 hex}`) or, failing
 * that, taken from the explicit kv_transfer_params keys (remote_host, remote_handshake_port,
 * ...).
 */

import { pythonRepr } from '../../config/config-error.ts';
import type { KVTransferParams } from '../../connector/types.ts';
import { KVError } from '../../errors/kv-error.ts';
import { foldLocalRank } from './config.ts';

export interface MoRIIOZmqAddress {
  readonly host: string;
  readonly handshakePort: number;
  readonly notifyPort: number;
}

/** A peer engine: its base ports (before the per-worker offset) and its parallel layout. */
export interface MoRIIOPeer extends MoRIIOZmqAddress {
  /** The peer's data-parallel rank folded to its node (the port offset uses it). */
  readonly dpRankLocal: number;
  readonly tpSize: number;
}

const PREFILL_RE = /___prefill_addr_(.+?)___decode_addr_/;
const DECODE_RE = /___decode_addr_(.+)_[0-9a-f]{32}(?:-.*)?$/;

export function malformedAddress(addr: string): KVError {
  return new KVError(
    'MORIIO_MALFORMED_ADDRESS',
    `Malformed zmq_address ${pythonRepr(addr)}: expected 'host:IP,handshake:PORT,notify:PORT' format`,
    {
      hint: 'The proxy embeds each peer as host:IP,handshake:PORT,notify:PORT in the request id; check the instances registered with the proxy (or send remote_host/remote_handshake_port/remote_notify_port in kv_transfer_params).',
      details: { address: addr },
    },
  );
}

/** `host:IP,handshake:PORT,notify:PORT`; each segment splits on its first ':' (IPv6-safe). */
export function parseMoRIIOZmqAddress(addr: string): MoRIIOZmqAddress {
  const fields = new Map<string, string>();
  for (const segment of addr.split(',')) {
    const i = segment.indexOf(':');
    if (i <= 0) throw malformedAddress(addr);
    fields.set(segment.slice(0, i), segment.slice(i + 1));
  }
  const host = fields.get('host');
  const handshakePort = toPort(fields.get('handshake'));
  const notifyPort = toPort(fields.get('notify'));
  if (!host || handshakePort === null || notifyPort === null) throw malformedAddress(addr);
  return { host, handshakePort, notifyPort };
}

export function formatMoRIIOZmqAddress(a: MoRIIOZmqAddress): string {
  return `host:${a.host},handshake:${a.handshakePort},notify:${a.notifyPort}`;
}

/** The two addresses the proxy embedded in a request id, or null when it carries none. */
export function addressesFromRequestId(
  requestId: string,
): { prefill: MoRIIOZmqAddress; decode: MoRIIOZmqAddress } | null {
  const p = PREFILL_RE.exec(requestId);
  const d = DECODE_RE.exec(requestId);
  if (!p?.[1] || !d?.[1]) return null;
  return { prefill: parseMoRIIOZmqAddress(p[1]), decode: parseMoRIIOZmqAddress(d[1]) };
}

/**
 * The remote prefill engine of a consumer request: the request-id embedding first, then the
 * explicit params. Null when neither names it.
 */
export function prefillPeerOf(requestId: string, params: KVTransferParams): MoRIIOPeer | null {
  const embedded = addressesFromRequestId(requestId)?.prefill ?? null;
  const explicit = explicitAddress(params);
  const address = embedded ?? explicit;
  if (!address) return null;
  const dpRank = intOr(params['remote_dp_rank'], 0);
  const dpLocal = intOr(params['remote_dp_size_local'], intOr(params['remote_dp_size'], 1));
  return {
    ...address,
    dpRankLocal: foldLocalRank(dpRank, dpLocal),
    tpSize: Math.max(1, intOr(params['remote_tp_size'], intOr(params['tp_size'], 1))),
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
  const handshakePort = toPort(params['remote_handshake_port']);
  const notifyPort = toPort(params['remote_notify_port']);
  if (host === null || handshakePort === null || notifyPort === null) return null;
  return { host, handshakePort, notifyPort };
}

function toPort(v: unknown): number | null {
  const n = typeof v === 'string' && /^\d+$/.test(v.trim()) ? Number(v.trim()) : v;
  return typeof n === 'number' && Number.isInteger(n) && n > 0 && n <= 65535 ? n : null;
}

function intOr(v: unknown, fallback: number): number {
  const n = typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : v;
  return typeof n === 'number' && Number.isInteger(n) && n >= 0 ? n : fallback;
}
