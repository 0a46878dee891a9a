/**
 * KV cache events on vLLM's wire (vllm/distributed/kv_events.py): a batch is the
 * msgpack array `[ts, [events...], data_parallel_rank]`; each event is a msgspec tagged
 * struct. vLLM encodes events as maps `{"type": "BlockStored", field: value, ...}` (fields
 * in declaration order, fields with defaults omitted when they hold the default); before
 * vLLM PR #42892 they were tagged arrays `["BlockStored", value, ...]`. `encodeBatch` writes
 * either layout; `decodeBatch` reads both.
 */
import { Decoder, Encoder } from '@msgpack/msgpack';

export type KVEventsLayout = 'map' | 'array';

export interface BlockStoredEvent {
  type: 'BlockStored';
  /** External 64-bit form (the low 64 bits of the digest). */
  blockHashes: bigint[];
  parentBlockHash: bigint | null;
  tokenIds: number[];
  blockSize: number;
  loraId: number | null;
  medium: string | null;
  loraName: string | null;
  /** One entry per block: the extra keys hashed with it, or null. */
  extraKeys?: (readonly unknown[] | null)[] | null;
  groupIdx?: number | null;
  kvCacheSpecKind?: string | null;
  kvCacheSpecSlidingWindow?: number | null;
  locality?: string | null;
}

export interface BlockRemovedEvent {
  type: 'BlockRemoved';
  blockHashes: bigint[];
  medium: string | null;
  groupIdx?: number | null;
  locality?: string | null;
}

export interface AllBlocksClearedEvent {
  type: 'AllBlocksCleared';
}

export type WireKVEvent = BlockStoredEvent | BlockRemovedEvent | AllBlocksClearedEvent;

export interface KVEventBatch {
  /** Seconds since the epoch (Python's time.time()). */
  ts: number;
  events: WireKVEvent[];
  dataParallelRank: number | null;
}

/** [wire name, property, required] in msgspec declaration order; optional fields default to None. */
type FieldSpec = readonly [string, string, boolean];
const FIELDS: Record<WireKVEvent['type'], readonly FieldSpec[]> = {
  BlockStored: [
    ['block_hashes', 'blockHashes', true],
    ['parent_block_hash', 'parentBlockHash', true],
    ['token_ids', 'tokenIds', true],
    ['block_size', 'blockSize', true],
    ['lora_id', 'loraId', true],
    ['medium', 'medium', true],
    ['lora_name', 'loraName', true],
    ['extra_keys', 'extraKeys', false],
    ['group_idx', 'groupIdx', false],
    ['kv_cache_spec_kind', 'kvCacheSpecKind', false],
    ['kv_cache_spec_sliding_window', 'kvCacheSpecSlidingWindow', false],
    ['locality', 'locality', false],
  ],
  BlockRemoved: [
    ['block_hashes', 'blockHashes', true],
    ['medium', 'medium', true],
    ['group_idx', 'groupIdx', false],
    ['locality', 'locality', false],
  ],
  AllBlocksCleared: [],
};

/** Small hashes as numbers so msgpack picks the smallest integer format, as msgspec does. */
function wireHash(h: bigint): bigint | number {
  return h <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(h) : h;
}

function wireValue(prop: string, value: unknown): unknown {
  if (value === undefined) return null;
  if (prop === 'blockHashes') return (value as bigint[]).map(wireHash);
  if (prop === 'parentBlockHash' && typeof value === 'bigint') return wireHash(value);
  return value;
}

function eventToWire(e: WireKVEvent, layout: KVEventsLayout): unknown {
  const fields = FIELDS[e.type];
  const src = e as unknown as Record<string, unknown>;
  if (layout === 'map') {
    const out: Record<string, unknown> = { type: e.type };
    for (const [name, prop, required] of fields) {
      const v = src[prop];
      if (required || (v !== undefined && v !== null)) out[name] = wireValue(prop, v);
    }
    return out;
  }
  // array_like + omit_defaults drops only the trailing run of default-valued fields.
  let last = 0;
  fields.forEach(([, prop, required], i) => {
    if (required || (src[prop] !== undefined && src[prop] !== null)) last = i + 1;
  });
  return [e.type, ...fields.slice(0, last).map(([, prop]) => wireValue(prop, src[prop]))];
}

const encoder = new Encoder({ useBigInt64: true });
const decoder = new Decoder({ useBigInt64: true });

/**
 * One batch as msgspec writes it. The 3-element array header and the float64 timestamp are
 * written by hand: msgspec always encodes `ts: float` as float64, while a JS number that
 * happens to be whole would be encoded as an integer by any msgpack library.
 */
export function encodeBatch(batch: KVEventBatch, layout: KVEventsLayout = 'map'): Uint8Array {
  const events = encoder.encode(batch.events.map((e) => eventToWire(e, layout)));
  const rank = encoder.encode(batch.dataParallelRank);
  const out = new Uint8Array(10 + events.length + rank.length);
  out[0] = 0x93;
  out[1] = 0xcb;
  new DataView(out.buffer).setFloat64(2, batch.ts, false);
  out.set(events, 10);
  out.set(rank, 10 + events.length);
  return out;
}

export class KVEventDecodeError extends Error {}

function asHash(v: unknown): bigint {
  if (typeof v === 'bigint') return BigInt.asUintN(64, v);
  if (typeof v === 'number' && Number.isSafeInteger(v)) return BigInt.asUintN(64, BigInt(v));
  if (v instanceof Uint8Array && v.length >= 8) {
    return new DataView(v.buffer, v.byteOffset, v.byteLength).getBigUint64(v.length - 8, false);
  }
  throw new KVEventDecodeError(`a block hash must be an integer or bytes, got ${typeof v}`);
}

function fromWire(raw: unknown): WireKVEvent {
  let type: unknown;
  let get: (name: string, index: number) => unknown;
  if (Array.isArray(raw)) {
    type = raw[0];
    get = (_name, i) => raw[i + 1];
  } else if (raw instanceof Map || (typeof raw === 'object' && raw !== null)) {
    const obj = raw as Record<string, unknown>;
    type = obj['type'];
    get = (name) => obj[name];
  } else throw new KVEventDecodeError('an event must be a tagged map or a tagged array');
  if (typeof type !== 'string' || !Object.hasOwn(FIELDS, type))
    throw new KVEventDecodeError(`unknown event type ${JSON.stringify(type)}`);
  const out: Record<string, unknown> = { type };
  FIELDS[type as WireKVEvent['type']].forEach(([name, prop], i) => {
    const v = get(name, i);
    if (prop === 'blockHashes') {
      if (!Array.isArray(v)) throw new KVEventDecodeError(`${type}.block_hashes must be an array`);
      out[prop] = v.map(asHash);
    } else if (prop === 'parentBlockHash') out[prop] = v === null || v === undefined ? null : asHash(v);
    else if (v !== undefined) out[prop] = typeof v === 'bigint' ? Number(v) : v;
    else if (FIELDS[type as WireKVEvent['type']][i]![2]) out[prop] = null;
  });
  return out as unknown as WireKVEvent;
}

/** Decodes a batch in either layout; throws KVEventDecodeError on anything else. */
export function decodeBatch(payload: Uint8Array): KVEventBatch {
  let raw: unknown;
  try {
    raw = decoder.decode(payload);
  } catch (e) {
    throw new KVEventDecodeError(`not msgpack: ${(e as Error).message}`);
  }
  if (!Array.isArray(raw) || raw.length < 2 || !Array.isArray(raw[1]))
    throw new KVEventDecodeError('a batch must be the array [ts, events, data_parallel_rank]');
  const rank = raw[2] ?? null;
  return {
    ts: Number(raw[0]),
    events: raw[1].map(fromWire),
    dataParallelRank: rank === null ? null : Number(rank),
  };
}
