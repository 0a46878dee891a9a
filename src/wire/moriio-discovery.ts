/**
 * MoRIIO service discovery (docs/proxy.md#moriio-discovery-wire-format), as vLLM speaks it:
 * each engine's scheduler side sends this ping, a msgpack map, from a ZMQ DEALER to the
 * proxy's ROUTER at `tcp://{proxy_ip}:{proxy_ping_port}` every 3 s; the proxy turns it into
 * a prefill or decode backend and drops it when the pings stop. No answer is sent.
 */
import { decode, encode } from '@msgpack/msgpack';
import { KVError } from '../errors/kv-error.ts';
import { formatMoRIIOZmqAddress, isMoRIIOZmqAddress, type MoRIIOZmqAddress } from './moriio-address.ts';
import { isRecord } from './values.ts';

/** vLLM's PING_INTERVAL. */
export const MORIIO_PING_INTERVAL_MS = 3000;

export type MoRIIOTransferMode = 'READ' | 'WRITE';

export interface MoRIIODiscoveryPing {
  type: 'P' | 'D';
  /** `ip:port` of the instance's OpenAI server. */
  http_address: string;
  zmq_address: string;
  dp_size: number;
  tp_size: number;
  transfer_mode: MoRIIOTransferMode;
}

/** `ip:port` of an instance's OpenAI server, as the ping and GET /kvconnect/info carry it. */
function formatMoRIIOHttpAddress(host: string, port: number): string {
  return `${host}:${port}`;
}

export interface MoRIIOInstance {
  producer: boolean;
  host: string;
  httpPort: number;
  zmq: MoRIIOZmqAddress;
  dpSize: number;
  tpSize: number;
  readMode: boolean;
}

export function formatDiscoveryPing(i: MoRIIOInstance): MoRIIODiscoveryPing {
  return {
    type: i.producer ? 'P' : 'D',
    http_address: formatMoRIIOHttpAddress(i.host, i.httpPort),
    zmq_address: formatMoRIIOZmqAddress(i.zmq),
    dp_size: i.dpSize,
    tp_size: i.tpSize,
    transfer_mode: i.readMode ? 'READ' : 'WRITE',
  };
}

function badPing(message: string): KVError {
  return new KVError('PROXY_DISCOVERY_BAD_PING', `Invalid discovery ping: ${message}`, {
    hint: 'Send one msgpack map {type: "P"|"D", http_address: "ip:port", zmq_address: "host:IP,handshake:PORT,notify:PORT", dp_size, tp_size, transfer_mode: "READ"|"WRITE"} per ZMQ message, as vLLM\'s MoRIIO engines do.',
  });
}

/** The ping as one ZMQ message: a msgpack map, integers as msgpack integers. */
export function encodeDiscoveryPing(ping: MoRIIODiscoveryPing): Uint8Array {
  return encode(ping);
}

/**
 * Decodes and validates one ping message; a bad one is a PROXY_DISCOVERY_BAD_PING naming the
 * field. A `{"type": "HELLO"}` message (which vLLM's proxy also accepts and ignores) is null.
 */
export function decodeDiscoveryPing(bytes: Uint8Array): MoRIIODiscoveryPing | null {
  let raw: unknown;
  try {
    raw = decode(bytes);
  } catch (e) {
    throw badPing(`not msgpack (${(e as Error).message})`);
  }
  if (isRecord(raw) && raw['type'] === 'HELLO') return null;
  return parseDiscoveryPing(raw);
}

/** Validates a decoded ping; a bad one is a PROXY_DISCOVERY_BAD_PING naming the field. */
export function parseDiscoveryPing(raw: unknown): MoRIIODiscoveryPing {
  if (!isRecord(raw)) throw badPing('the message must be a map');
  const type = raw['type'];
  if (type !== 'P' && type !== 'D') throw badPing(`type must be "P" or "D", got ${JSON.stringify(type)}`);
  const http = raw['http_address'];
  if (typeof http !== 'string' || !/^[^\s/]+:\d+$/.test(http)) {
    throw badPing(`http_address must be "ip:port", got ${JSON.stringify(http)}`);
  }
  const zmq = raw['zmq_address'];
  if (typeof zmq !== 'string' || !isMoRIIOZmqAddress(zmq)) {
    throw badPing(`zmq_address must be "host:IP,handshake:PORT,notify:PORT", got ${JSON.stringify(zmq)}`);
  }
  const size = (key: string): number => {
    const v = raw[key] ?? 1;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
      throw badPing(`${key} must be a positive integer, got ${JSON.stringify(v)}`);
    }
    return v;
  };
  const mode = typeof raw['transfer_mode'] === 'string' ? raw['transfer_mode'].toUpperCase() : 'WRITE';
  if (mode !== 'READ' && mode !== 'WRITE') {
    throw badPing(`transfer_mode must be "READ" or "WRITE", got ${JSON.stringify(raw['transfer_mode'])}`);
  }
  return {
    type,
    http_address: http,
    zmq_address: zmq,
    dp_size: size('dp_size'),
    tp_size: size('tp_size'),
    transfer_mode: mode,
  };
}
