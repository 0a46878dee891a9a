/**
 * The four-lane e^x shared by the activation and softmax modules: 2^k · p(r) (see
 * wasm-swiglu.ts for the derivation and its accuracy), in the encoding of
 * src/util/wasm-encoding.ts.
 */
import { f32x4, get, i32c, i32x4, set, simd, simdOp } from '../../../util/wasm-encoding.ts';

/** Pushes e^(local x) (x already clamped to ±87), using locals k and r as temporaries. */
export function exp(x: number, k: number, r: number): number[] {
  const code = [
    ...get(x),
    ...f32x4(Math.LOG2E),
    ...simdOp(simd.f32x4Mul),
    ...simdOp(simd.f32x4Nearest),
    ...set(k),
  ];
  code.push(...get(x), ...get(k), ...f32x4(0.693359375), ...simdOp(simd.f32x4Mul), ...simdOp(simd.f32x4Sub));
  code.push(
    ...get(k),
    ...f32x4(-2.1219444e-4),
    ...simdOp(simd.f32x4Mul),
    ...simdOp(simd.f32x4Sub),
    ...set(r),
  );
  const coefficients = [1 / 5040, 1 / 720, 1 / 120, 1 / 24, 1 / 6, 1 / 2, 1, 1];
  code.push(...f32x4(coefficients[0] as number));
  for (const c of coefficients.slice(1)) {
    code.push(...get(r), ...simdOp(simd.f32x4Mul), ...f32x4(c), ...simdOp(simd.f32x4Add));
  }
  code.push(...get(k), ...simdOp(simd.i32x4TruncSatF32x4S), ...i32x4(127), ...simdOp(simd.i32x4Add));
  code.push(...i32c(23), ...simdOp(simd.i32x4Shl), ...simdOp(simd.f32x4Mul));
  return code;
}
