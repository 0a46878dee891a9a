/**
 * KV dtypes stored as raw bytes, and exact conversions to and from float32.
 * float16 and bfloat16 rounding is round-to-nearest-even, as hardware casts do; NaN stays
 * NaN (quiet) and ±Inf/±0 are preserved. Node 20 has no Math.f16round, hence the bit work.
 */
import type { KVCacheDtype } from '../config/types.ts';

const DTYPE_BYTES: Readonly<Record<KVCacheDtype, number>> = { float32: 4, float16: 2, bfloat16: 2 };

export function dtypeBytes(dtype: KVCacheDtype): number {
  return DTYPE_BYTES[dtype];
}

const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);

/** float32 → IEEE binary16 bits, round-to-nearest-even. */
export function f32ToF16Bits(value: number): number {
  scratchF32[0] = value;
  const x = scratchU32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  const mant = x & 0x7fffff;
  if (exp === 0xff) return mant === 0 ? sign | 0x7c00 : sign | 0x7e00 | (mant >>> 13);
  const e = exp - 112; // rebias 127 → 15
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    const full = mant | 0x800000;
    const shift = 14 - e;
    let half = full >>> shift;
    const rem = full & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (rem > halfway || (rem === halfway && (half & 1) === 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  // A carry out of the mantissa correctly bumps the exponent (up to Inf).
  if (rem > 0x1000 || (rem === 0x1000 && (half & 1) === 1)) half++;
  return sign | half;
}

/** IEEE binary16 bits → float32 value (exact). */
export function f16BitsToF32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >>> 10) & 0x1f;
  const mant = bits & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant === 0 ? sign * Number.POSITIVE_INFINITY : Number.NaN;
  return sign * (1024 + mant) * 2 ** (exp - 25);
}

/** float32 → bfloat16 bits, round-to-nearest-even; NaN becomes a quiet NaN. */
export function f32ToBf16Bits(value: number): number {
  scratchF32[0] = value;
  const x = scratchU32[0]!;
  if ((x & 0x7f800000) === 0x7f800000 && (x & 0x7fffff) !== 0) return ((x >>> 16) | 0x40) & 0xffff;
  const bias = 0x7fff + ((x >>> 16) & 1);
  return ((x + bias) >>> 16) & 0xffff;
}

/** bfloat16 bits → float32 value (exact). */
export function bf16BitsToF32(bits: number): number {
  scratchU32[0] = (bits & 0xffff) << 16;
  return scratchF32[0]!;
}

export type ToBits = (value: number) => number;
export type FromBits = (bits: number) => number;

export function encoderFor(dtype: 'float16' | 'bfloat16'): ToBits {
  return dtype === 'float16' ? f32ToF16Bits : f32ToBf16Bits;
}

export function decoderFor(dtype: 'float16' | 'bfloat16'): FromBits {
  return dtype === 'float16' ? f16BitsToF32 : bf16BitsToF32;
}
