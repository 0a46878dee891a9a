import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../../src/kv/dtype.ts';

/** Independent oracle: nearest of all finite binary16 values by exhaustive search, ties to even. */
const finiteF16: { bits: number; value: number }[] = [];
for (let bits = 0; bits < 0x7c00; bits++) finiteF16.push({ bits, value: f16BitsToF32(bits) });
const MAX_F16 = 65504;

function oracleF16(x: number): number {
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  // Halfway between 65504 and the next (virtual) step 65536 rounds to Inf.
  if (a >= MAX_F16 + 16) return sign | 0x7c00;
  let lo = 0;
  let hi = finiteF16.length - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (finiteF16[mid]!.value <= a) lo = mid;
    else hi = mid;
  }
  const below = finiteF16[lo]!;
  const above = finiteF16[hi]!;
  if (a === below.value) return sign | below.bits;
  const dBelow = a - below.value;
  const dAbove = above.value - a;
  if (dBelow < dAbove) return sign | below.bits;
  if (dAbove < dBelow) return sign | above.bits;
  return sign | ((below.bits & 1) === 0 ? below.bits : above.bits);
}

test('float16: every bit pattern round-trips through float32', () => {
  for (let bits = 0; bits < 0x10000; bits++) {
    const value = f16BitsToF32(bits);
    const back = f32ToF16Bits(value);
    if (Number.isNaN(value)) assert.ok((back & 0x7c00) === 0x7c00 && (back & 0x3ff) !== 0, `NaN ${bits}`);
    else assert.equal(back, bits, `bits ${bits.toString(16)}`);
  }
});

test('float16: midpoints between neighbours round to even, and ±1 ulp around them to nearest', () => {
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  for (let i = 0; i + 1 < finiteF16.length; i++) {
    const mid = (finiteF16[i]!.value + finiteF16[i + 1]!.value) / 2;
    f32[0] = mid;
    assert.equal(f32[0], mid, 'midpoints are exact in float32');
    for (const delta of [-1, 0, 1]) {
      u32[0] = u32[0]! + delta;
      const x: number = f32[0]!;
      assert.equal(f32ToF16Bits(x), oracleF16(x), `x=${x}`);
      assert.equal(f32ToF16Bits(-x), oracleF16(-x), `x=${-x}`);
      f32[0] = mid;
    }
  }
});

test('float16: random float32 values match the oracle; special values', () => {
  fc.assert(
    fc.property(fc.float({ noNaN: true }), (x) => f32ToF16Bits(x) === oracleF16(x)),
    { numRuns: 20000 },
  );
  assert.equal(f32ToF16Bits(Number.POSITIVE_INFINITY), 0x7c00);
  assert.equal(f32ToF16Bits(Number.NEGATIVE_INFINITY), 0xfc00);
  assert.equal(f32ToF16Bits(-0), 0x8000);
  assert.equal(f32ToF16Bits(65520), 0x7c00, '65520 is halfway to 65536: ties to even = Inf');
  assert.equal(f32ToF16Bits(65519), 0x7bff);
  assert.ok(Number.isNaN(f16BitsToF32(f32ToF16Bits(Number.NaN))));
  assert.equal(f32ToF16Bits(2 ** -25), 0, 'half of the smallest subnormal ties to 0');
  assert.equal(f32ToF16Bits(2 ** -25 * 1.0000001), 1);
});

test('bfloat16: every bit pattern round-trips; rounding is to nearest even', () => {
  for (let bits = 0; bits < 0x10000; bits++) {
    const value = bf16BitsToF32(bits);
    if (Number.isNaN(value)) assert.ok(Number.isNaN(bf16BitsToF32(f32ToBf16Bits(value))));
    else assert.equal(f32ToBf16Bits(value), bits);
  }
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 0xffffffff }), (raw) => {
      u32[0] = raw;
      const x = f32[0]!;
      if (Number.isNaN(x)) return Number.isNaN(bf16BitsToF32(f32ToBf16Bits(x)));
      const lo = raw >>> 16;
      const below = bf16BitsToF32(lo);
      // Past the largest finite value the next step is the virtual 2^128, which rounds to Inf.
      const above = (lo & 0x7fff) === 0x7f7f ? Math.sign(x) * 2 ** 128 : bf16BitsToF32(lo + 1);
      const got = f32ToBf16Bits(x);
      const dB = Math.abs(x - below);
      const dA = Math.abs(above - x);
      const expected = dB < dA ? lo : dA < dB ? lo + 1 : (lo & 1) === 0 ? lo : lo + 1;
      return got === (expected & 0xffff);
    }),
    { numRuns: 50000 },
  );
  assert.equal(f32ToBf16Bits(Number.POSITIVE_INFINITY), 0x7f80);
  assert.equal(f32ToBf16Bits(3.4028234663852886e38), 0x7f80, 'FLT_MAX rounds up to Inf');
});
