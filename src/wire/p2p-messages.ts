/**
 * The p2p tier's control messages (docs/connectors/offloading.md#wire), vLLM's P2P session
 * protocol: a consumer connects (its transfer-agent metadata, block length, run-configuration
 * fingerprint and hash seed), then per kv_request_id sends `lookup` (peer pulls only) and one
 * `fetch`; the producer answers `lookup_resp`, writes the blocks into the consumer's staging
 * region over the transfer agent and sends `transfer_done`. Each message is a msgpack map
 * with a `type`, framed by a 4-byte big-endian length. Decoding is strict: a message with a
 * missing or mistyped field is refused with the field named, as vLLM's validators refuse it.
 */
import { decode, encode } from '@msgpack/msgpack';

export interface P2PConnectMsg {
  type: 'connect';
  peer_id: string;
  /** The consumer's transfer-agent metadata (src/transfer AgentMetadata), opaque here. */
  agent_metadata: Record<string, unknown>;
  /** Bytes of one staging block (one chunk of one KV cache group). */
  block_len: number;
  num_blocks: number;
  /** Digest of the run configuration: peers with different layouts never exchange bytes. */
  config_fingerprint: string;
  /** The block-hash seed (PYTHONHASHSEED or the default): hashes only match under one seed. */
  hash_seed: string;
}

export interface P2PConnectAckMsg {
  type: 'connect_ack';
  peer_id: string;
  agent_metadata: Record<string, unknown>;
}

/** kvconnect's: the producer refuses the handshake and says why (vLLM closes the socket). */
export interface P2PConnectRejectMsg {
  type: 'connect_reject';
  peer_id: string;
  reason: string;
}

export interface P2PDisconnectMsg {
  type: 'disconnect';
}

export interface P2PLookupMsg {
  type: 'lookup';
  kv_request_id: string;
  block_hashes: string[];
}

export interface P2PLookupRespMsg {
  type: 'lookup_resp';
  kv_request_id: string;
  block_hashes: string[];
  hits: boolean[];
}

export interface P2PFetchMsg {
  type: 'fetch';
  kv_request_id: string;
  block_hashes: string[];
  /** Consumer staging blocks the producer writes each block into (same length). */
  block_indexes: number[];
}

export interface P2PTransferDoneMsg {
  type: 'transfer_done';
  kv_request_id: string;
  success: boolean;
}

export interface P2PAbortFetchMsg {
  type: 'abort_fetch';
  kv_request_id: string;
}

export interface P2PAbortAckMsg {
  type: 'abort_ack';
  kv_request_id: string;
}

export type P2PMessage =
  | P2PConnectMsg
  | P2PConnectAckMsg
  | P2PConnectRejectMsg
  | P2PDisconnectMsg
  | P2PLookupMsg
  | P2PLookupRespMsg
  | P2PFetchMsg
  | P2PTransferDoneMsg
  | P2PAbortFetchMsg
  | P2PAbortAckMsg;

/** Largest control frame accepted (a fetch of many thousands of blocks fits). */
export const P2P_MAX_FRAME_BYTES = 16 << 20;

type Rec = Record<string, unknown>;

function need(m: Rec, key: string, ok: (v: unknown) => boolean, expected: string): void {
  if (!ok(m[key])) {
    throw new TypeError(
      `p2p ${String(m['type'])} message: ${key}: expected ${expected}, got ${JSON.stringify(m[key]) ?? 'nothing'}`,
    );
  }
}

const isStr = (v: unknown): boolean => typeof v === 'string';
const isPosInt = (v: unknown): boolean => typeof v === 'number' && Number.isInteger(v) && v > 0;
const isStrList = (v: unknown): boolean => Array.isArray(v) && v.every(isStr);
const isObj = (v: unknown): boolean => typeof v === 'object' && v !== null && !Array.isArray(v);

function sameLength(m: Rec, a: string, b: string): void {
  const x = m[a] as unknown[];
  const y = m[b] as unknown[];
  if (x.length !== y.length) {
    throw new TypeError(
      `p2p ${String(m['type'])} message: ${a}/${b} length mismatch: ${x.length} vs ${y.length}`,
    );
  }
}

/** Checks a decoded message; throws a TypeError naming the bad field. */
export function parseP2PMessage(raw: unknown): P2PMessage {
  if (!isObj(raw)) throw new TypeError(`p2p message: expected a map, got ${typeof raw}`);
  const m = raw as Rec;
  switch (m['type']) {
    case 'connect':
      need(m, 'peer_id', isStr, 'a string');
      need(m, 'agent_metadata', isObj, 'a map');
      need(m, 'block_len', isPosInt, 'a positive integer');
      need(m, 'num_blocks', isPosInt, 'a positive integer');
      need(m, 'config_fingerprint', isStr, 'a string');
      need(m, 'hash_seed', isStr, 'a string');
      break;
    case 'connect_ack':
      need(m, 'peer_id', isStr, 'a string');
      need(m, 'agent_metadata', isObj, 'a map');
      break;
    case 'connect_reject':
      need(m, 'peer_id', isStr, 'a string');
      need(m, 'reason', isStr, 'a string');
      break;
    case 'disconnect':
      break;
    case 'lookup':
      need(m, 'kv_request_id', isStr, 'a string');
      need(m, 'block_hashes', isStrList, 'a list of strings');
      break;
    case 'lookup_resp':
      need(m, 'kv_request_id', isStr, 'a string');
      need(m, 'block_hashes', isStrList, 'a list of strings');
      need(
        m,
        'hits',
        (v) => Array.isArray(v) && v.every((h) => typeof h === 'boolean'),
        'a list of booleans',
      );
      sameLength(m, 'block_hashes', 'hits');
      break;
    case 'fetch':
      need(m, 'kv_request_id', isStr, 'a string');
      need(m, 'block_hashes', isStrList, 'a list of strings');
      need(
        m,
        'block_indexes',
        (v) => Array.isArray(v) && v.every((i) => typeof i === 'number' && Number.isInteger(i) && i >= 0),
        'a list of non-negative integers',
      );
      sameLength(m, 'block_hashes', 'block_indexes');
      break;
    case 'transfer_done':
      need(m, 'kv_request_id', isStr, 'a string');
      need(m, 'success', (v) => typeof v === 'boolean', 'a boolean');
      break;
    case 'abort_fetch':
    case 'abort_ack':
      need(m, 'kv_request_id', isStr, 'a string');
      break;
    default:
      throw new TypeError(`p2p message: unknown type ${JSON.stringify(m['type'])}`);
  }
  return m as unknown as P2PMessage;
}

/** One length-prefixed frame holding the message. */
export function formatP2PFrame(msg: P2PMessage): Buffer {
  const body = encode(msg);
  const frame = Buffer.allocUnsafe(4 + body.byteLength);
  frame.writeUInt32BE(body.byteLength, 0);
  frame.set(body, 4);
  return frame;
}

/** Splits a byte stream into messages; throws on an oversized frame or a malformed message. */
export class P2PFrameReader {
  #buf: Buffer = Buffer.alloc(0);

  push(chunk: Buffer): P2PMessage[] {
    this.#buf = this.#buf.length === 0 ? chunk : Buffer.concat([this.#buf, chunk]);
    const out: P2PMessage[] = [];
    while (this.#buf.length >= 4) {
      const len = this.#buf.readUInt32BE(0);
      if (len > P2P_MAX_FRAME_BYTES)
        throw new TypeError(`p2p frame of ${len} bytes exceeds ${P2P_MAX_FRAME_BYTES}`);
      if (this.#buf.length < 4 + len) break;
      out.push(parseP2PMessage(decode(this.#buf.subarray(4, 4 + len))));
      this.#buf = this.#buf.subarray(4 + len);
    }
    return out;
  }
}
