/**
 * KV cache events on vLLM's wire (vllm/distributed/kv_events.py): a batch is the
 * msgpack array `[ts, [events...], data_parallel_rank]`; each event is a msgspec tagged
 * struct. vLLM encodes events as maps `{"type": "BlockStored", field: value, ...}` (fields
 * in declaration order, fields with defaults omitted when they hold the default); before
 * vLLM PR #42892 they were tagged arrays `["BlockStored", value, ...]`. `encodeBatch` writes
 * either layout; `decodeBatch` reads both.
 */
import { Encoder } from '@msgpack/msgpack';
import { msgspecValue, strictDecoder, unboxFloats, WireFloat } from './msgspec-msgpack.ts';

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

/** The msgspec type of a field, as the decoder checks it. */
type FieldType = 'hashes' | 'hash?' | 'tokenIds' | 'uint' | 'int?' | 'str?' | 'extraKeys?';
/** [wire name, property, required, type] in msgspec declaration order; optional fields default to None. */
type FieldSpec = readonly [string, string, boolean, FieldType];
const FIELDS: Record<WireKVEvent['type'], readonly FieldSpec[]> = {
  BlockStored: [
    ['block_hashes', 'blockHashes', true, 'hashes'],
    ['parent_block_hash', 'parentBlockHash', true, 'hash?'],
    ['token_ids', 'tokenIds', true, 'tokenIds'],
    ['block_size', 'blockSize', true, 'uint'],
    ['lora_id', 'loraId', true, 'int?'],
    ['medium', 'medium', true, 'str?'],
    ['lora_name', 'loraName', true, 'str?'],
    ['extra_keys', 'extraKeys', false, 'extraKeys?'],
    ['group_idx', 'groupIdx', false, 'int?'],
    ['kv_cache_spec_kind', 'kvCacheSpecKind', false, 'str?'],
    ['kv_cache_spec_sliding_window', 'kvCacheSpecSlidingWindow', false, 'int?'],
    ['locality', 'locality', false, 'str?'],
  ],
  BlockRemoved: [
    ['block_hashes', 'blockHashes', true, 'hashes'],
    ['medium', 'medium', true, 'str?'],
    ['group_idx', 'groupIdx', false, 'int?'],
    ['locality', 'locality', false, 'str?'],
  ],
  AllBlocksCleared: [],
};

/** Every integer in msgspec's smallest integer format (hashes span the whole 64-bit range). */
function wireValue(value: unknown): unknown {
  return value === undefined ? null : msgspecValue(value);
}

function eventToWire(e: WireKVEvent, layout: KVEventsLayout): unknown {
  const fields = FIELDS[e.type];
  const src = e as unknown as Record<string, unknown>;
  if (layout === 'map') {
    const out: Record<string, unknown> = { type: e.type };
    for (const [name, prop, required] of fields) {
      const v = src[prop];
      if (required || (v !== undefined && v !== null)) out[name] = wireValue(v);
    }
    return out;
  }
  // array_like + omit_defaults drops only the trailing run of default-valued fields.
  let last = 0;
  fields.forEach(([, prop, required], i) => {
    if (required || (src[prop] !== undefined && src[prop] !== null)) last = i + 1;
  });
  return [e.type, ...fields.slice(0, last).map(([, prop]) => wireValue(src[prop]))];
}

const encoder = new Encoder({ useBigInt64: true });
const decoder = strictDecoder();

/**
 * One batch as msgspec writes it. The 3-element array header and the float64 timestamp are
 * written by hand: msgspec always encodes `ts: float` as float64, while a JS number that
 * happens to be whole would be encoded as an integer by any msgpack library.
 */
export function encodeBatch(batch: KVEventBatch, layout: KVEventsLayout = 'map'): Uint8Array {
  const events = encoder.encode(batch.events.map((e) => eventToWire(e, layout)));
  const rank = encoder.encode(wireValue(batch.dataParallelRank));
  const out = new Uint8Array(10 + events.length + rank.length);
  out[0] = 0x93;
  out[1] = 0xcb;
  new DataView(out.buffer).setFloat64(2, batch.ts, false);
  out.set(events, 10);
  out.set(rank, 10 + events.length);
  return out;
}

export class KVEventDecodeError extends Error {}

/** msgspec's name for what a value decoded to, for error messages. */
function wireType(v: unknown): string {
  if (v === null) return 'null';
  if (v instanceof WireFloat) return 'float';
  if (typeof v === 'number' || typeof v === 'bigint') return 'int';
  if (typeof v === 'string') return 'str';
  if (typeof v === 'boolean') return 'bool';
  if (v instanceof Uint8Array) return 'bytes';
  if (Array.isArray(v)) return 'array';
  return 'object';
}

function expected(what: string, v: unknown, path: string): never {
  throw new KVEventDecodeError(`Expected \`${what}\`, got \`${wireType(v)}\` - at \`${path}\``);
}

function isInt(v: unknown): v is number | bigint {
  return typeof v === 'bigint' || typeof v === 'number';
}

/** An ExternalBlockHash (`bytes | int`) as its unsigned 64-bit value. */
function asHash(v: unknown, path: string): bigint {
  if (isInt(v)) return BigInt.asUintN(64, BigInt(v));
  if (v instanceof Uint8Array) {
    const tail = new Uint8Array(8);
    tail.set(v.subarray(Math.max(0, v.length - 8)), 8 - Math.min(8, v.length));
    return new DataView(tail.buffer).getBigUint64(0, false);
  }
  return expected('int | bytes', v, path);
}

/** An int field as a JS number; ids and sizes never leave the safe range. */
function asInt(v: unknown, path: string, min = -Infinity, max = Infinity): number {
  if (!isInt(v)) return expected('int', v, path);
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < min || n > max)
    throw new KVEventDecodeError(`Expected \`int\` in [${min}, ${max}], got ${v} - at \`${path}\``);
  return n;
}

function asArray(v: unknown, path: string): unknown[] {
  return Array.isArray(v) ? v : expected('array', v, path);
}

/** One field checked against its msgspec type (and the u32 token ids llm-d and Dynamo read). */
function fieldValue(type: FieldType, v: unknown, path: string): unknown {
  if (v === null && type.endsWith('?')) return null;
  switch (type) {
    case 'hashes':
      return asArray(v, path).map((h, i) => asHash(h, `${path}[${i}]`));
    case 'hash?':
      return asHash(v, path);
    case 'tokenIds':
      return asArray(v, path).map((t, i) => asInt(t, `${path}[${i}]`, 0, 2 ** 32 - 1));
    case 'uint':
      return asInt(v, path, 0);
    case 'int?':
      return asInt(v, path);
    case 'str?':
      return typeof v === 'string' ? v : expected('str | null', v, path);
    case 'extraKeys?':
      return asArray(v, path).map((k, i) => (k === null ? null : asArray(unboxFloats(k), `${path}[${i}]`)));
  }
}

function fromWire(raw: unknown, path: string): WireKVEvent {
  let type: unknown;
  let get: (name: string, index: number) => unknown;
  if (Array.isArray(raw)) {
    type = raw[0];
    get = (_name, i) => raw[i + 1];
  } else if (
    typeof raw === 'object' &&
    raw !== null &&
    !(raw instanceof Uint8Array) &&
    !(raw instanceof WireFloat)
  ) {
    const obj = raw as Record<string, unknown>;
    type = obj['type'];
    get = (name) => (Object.hasOwn(obj, name) ? obj[name] : undefined);
  } else return expected('BlockStored | BlockRemoved | AllBlocksCleared', raw, path);
  if (typeof type !== 'string' || !Object.hasOwn(FIELDS, type))
    throw new KVEventDecodeError(`Invalid value ${JSON.stringify(type)} - at \`${path}.type\``);
  const fields = FIELDS[type as WireKVEvent['type']];
  if (Array.isArray(raw) && raw.length > fields.length + 1)
    throw new KVEventDecodeError(
      `Expected \`array\` of at most length ${fields.length + 1} - at \`${path}\``,
    );
  const out: Record<string, unknown> = { type };
  for (const [i, [name, prop, required, fieldType]] of fields.entries()) {
    const v = get(name, i);
    if (v === undefined || (v === null && !required)) {
      if (v === undefined && required)
        throw new KVEventDecodeError(`Object missing required field \`${name}\` - at \`${path}\``);
      continue;
    }
    out[prop] = fieldValue(fieldType, v, `${path}.${name}`);
  }
  return out as unknown as WireKVEvent;
}

/**
 * Decodes a batch in either layout as strictly as msgspec decodes vLLM's `KVEventBatch`: a
 * float where an int is due, a missing required field or a wrong type is a
 * KVEventDecodeError naming the path, as msgspec's ValidationError does. Unknown map keys
 * are ignored, as msgspec ignores them.
 */
export function decodeBatch(payload: Uint8Array): KVEventBatch {
  let raw: unknown;
  try {
    raw = decoder.decode(payload);
  } catch (e) {
    throw new KVEventDecodeError(`not msgpack: ${(e as Error).message}`);
  }
  if (!Array.isArray(raw) || raw.length < 2 || raw.length > 3)
    throw new KVEventDecodeError('a batch must be the array [ts, events, data_parallel_rank]');
  const [ts, events, rank] = raw as [unknown, unknown, unknown];
  if (!(ts instanceof WireFloat) && !isInt(ts)) expected('float', ts, '$[0]');
  return {
    ts: ts instanceof WireFloat ? ts.value : Number(ts),
    events: asArray(events, '$[1]').map((e, i) => fromWire(e, `$[1][${i}]`)),
    dataParallelRank:
      rank === undefined || rank === null ? null : asInt(rank, '$[2]', -(2 ** 31), 2 ** 31 - 1),
  };
}
