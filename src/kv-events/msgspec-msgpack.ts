/**
 * msgpack as msgspec writes and reads it, on top of `@msgpack/msgpack`.
 *
 * Writing: msgspec encodes every Python int in the smallest msgpack integer format that
 * holds it (positive fixint, uint8/16/32/64; negative fixint, int8/16/32/64) and never as a
 * float. `@msgpack/msgpack` with `useBigInt64` writes a JS number at or above 2^32 (or below
 * -2^31) as float64 and a bigint always as uint64/int64; `msgspecInt` hands it the one form
 * it encodes exactly as msgspec would.
 *
 * Reading: msgspec refuses a float where the schema says `int`, but `@msgpack/msgpack`
 * decodes float32/float64 and integers alike to JS numbers. `strictDecoder()` returns a
 * decoder that boxes every wire float in a `WireFloat`, so a schema check can tell `1.0`
 * from `1`; integers stay numbers, and uint64/int64 become bigints.
 */
import { Decoder } from '@msgpack/msgpack';

const UINT32_END = 2 ** 32;
const INT32_MIN = -(2 ** 31);
const UINT64_END = 2n ** 64n;
const INT64_MIN = -(2n ** 63n);

/** The value whose `@msgpack/msgpack` (useBigInt64) encoding is msgspec's encoding of the int. */
export function msgspecInt(v: number | bigint): number | bigint {
  if (typeof v === 'number') {
    if (!Number.isInteger(v)) throw new RangeError(`${v} is not an integer`);
    return v >= UINT32_END || v < INT32_MIN ? msgspecInt(BigInt(v)) : v;
  }
  if (v >= UINT64_END || v < INT64_MIN) throw new RangeError(`${v} does not fit msgpack's 64-bit integers`);
  return v >= BigInt(UINT32_END) || v < BigInt(INT32_MIN) ? v : Number(v);
}

/** A float read from the wire (float32 or float64), kept apart from integers. */
export class WireFloat {
  readonly value: number;
  constructor(value: number) {
    this.value = value;
  }
}

/** A strictly decoded value with its `WireFloat`s back to numbers (for `Any`-typed fields). */
export function unboxFloats(v: unknown): unknown {
  if (v instanceof WireFloat) return v.value;
  if (Array.isArray(v)) return v.map(unboxFloats);
  if (typeof v === 'object' && v !== null && !(v instanceof Uint8Array))
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, unboxFloats(x)]));
  return v;
}

/**
 * A decoder whose floats come out as `WireFloat`. The library has no option for it, so the
 * instance's two float readers are wrapped; `test/kv-events/msgspec-ints.test.ts` fails if
 * a library upgrade changes them.
 */
export function strictDecoder(): Decoder {
  const decoder = new Decoder({ useBigInt64: true });
  const readers = decoder as unknown as Record<'readF32' | 'readF64', () => number>;
  for (const name of ['readF32', 'readF64'] as const) {
    const read = readers[name];
    if (typeof read !== 'function') throw new Error(`@msgpack/msgpack's Decoder has no ${name}`);
    readers[name] = function (this: Decoder) {
      return new WireFloat(read.call(this)) as unknown as number;
    };
  }
  return decoder;
}

/** Walks a value to be encoded and gives every integer its msgspec form. */
export function msgspecValue(v: unknown): unknown {
  if (typeof v === 'bigint' || (typeof v === 'number' && Number.isInteger(v))) return msgspecInt(v);
  if (Array.isArray(v)) return v.map(msgspecValue);
  return v;
}
