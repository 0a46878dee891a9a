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

/** One field's check: its key, the test, and what it must be (for the error). */
type Field = readonly [key: string, ok: (v: unknown) => boolean, expected: string];

const STR: (key: string) => Field = (key) => [key, (v) => typeof v === 'string', 'a string'];
const MAP: (key: string) => Field = (key) => [
  key,
  (v) => typeof v === 'object' && v !== null && !Array.isArray(v),
  'a map',
];
const POS_INT: (key: string) => Field = (key) => [
  key,
  (v) => typeof v === 'number' && Number.isInteger(v) && v > 0,
  'a positive integer',
];
const LIST = (key: string, item: (v: unknown) => boolean, expected: string): Field => [
  key,
  (v) => Array.isArray(v) && v.every(item),
  expected,
];
const HASHES = LIST('block_hashes', (v) => typeof v === 'string', 'a list of strings');

/** Each message type's fields, and the pair of lists that must have one length. */
const SHAPES: Record<P2PMessage['type'], { fields: readonly Field[]; parallel?: readonly [string, string] }> =
  {
    connect: {
      fields: [
        STR('peer_id'),
        MAP('agent_metadata'),
        POS_INT('block_len'),
        POS_INT('num_blocks'),
        STR('config_fingerprint'),
        STR('hash_seed'),
      ],
    },
    connect_ack: { fields: [STR('peer_id'), MAP('agent_metadata')] },
    connect_reject: { fields: [STR('peer_id'), STR('reason')] },
    disconnect: { fields: [] },
    lookup: { fields: [STR('kv_request_id'), HASHES] },
    lookup_resp: {
      fields: [
        STR('kv_request_id'),
        HASHES,
        LIST('hits', (v) => typeof v === 'boolean', 'a list of booleans'),
      ],
      parallel: ['block_hashes', 'hits'],
    },
    fetch: {
      fields: [
        STR('kv_request_id'),
        HASHES,
        LIST(
          'block_indexes',
          (v) => typeof v === 'number' && Number.isInteger(v) && v >= 0,
          'a list of non-negative integers',
        ),
      ],
      parallel: ['block_hashes', 'block_indexes'],
    },
    transfer_done: {
      fields: [STR('kv_request_id'), ['success', (v) => typeof v === 'boolean', 'a boolean']],
    },
    abort_fetch: { fields: [STR('kv_request_id')] },
    abort_ack: { fields: [STR('kv_request_id')] },
  };

/** Checks a decoded message; throws a TypeError naming the bad field. */
export function parseP2PMessage(raw: unknown): P2PMessage {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new TypeError(`p2p message: expected a map, got ${typeof raw}`);
  }
  const m = raw as Rec;
  const type = m['type'];
  const shape =
    typeof type === 'string' && Object.hasOwn(SHAPES, type) ? SHAPES[type as P2PMessage['type']] : null;
  if (!shape) throw new TypeError(`p2p message: unknown type ${JSON.stringify(type)}`);
  for (const [key, ok, expected] of shape.fields) {
    if (!ok(m[key])) {
      throw new TypeError(
        `p2p ${type} message: ${key}: expected ${expected}, got ${JSON.stringify(m[key]) ?? 'nothing'}`,
      );
    }
  }
  if (shape.parallel) {
    const [a, b] = shape.parallel;
    const [x, y] = [(m[a] as unknown[]).length, (m[b] as unknown[]).length];
    if (x !== y) throw new TypeError(`p2p ${type} message: ${a}/${b} length mismatch: ${x} vs ${y}`);
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
