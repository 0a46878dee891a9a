/**
 * WebAssembly SIMD building blocks shared by the activation and softmax modules: opcode
 * numbers, local get/set, vector constants, and a four-lane e^x (2^k · p(r), see
 * wasm-swiglu.ts for the derivation and its accuracy).
 */
import { uleb } from './wasm-assembler.ts';

export const simd = {
  load: 0x00,
  store: 0x0b,
  const: 0x0c,
  f32x4Splat: 0x13,
  f32x4ExtractLane: 0x1f,
  f32x4Nearest: 0x6a,
  i32x4Shl: 0xab,
  i32x4Add: 0xae,
  f32x4Neg: 0xe1,
  f32x4Add: 0xe4,
  f32x4Sub: 0xe5,
  f32x4Mul: 0xe6,
  f32x4Div: 0xe7,
  f32x4Min: 0xe8,
  f32x4Max: 0xe9,
  i32x4TruncSatF32x4S: 0xf8,
} as const;

export const s = (code: number, ...imm: number[]): number[] => [0xfd, ...uleb(code), ...imm];
export const get = (i: number): number[] => [0x20, i];
export const set = (i: number): number[] => [0x21, i];

export function f32x4(value: number): number[] {
  const bytes = new Uint8Array(new Float32Array([value, value, value, value]).buffer);
  return s(simd.const, ...bytes);
}

export function i32x4(value: number): number[] {
  const bytes = new Uint8Array(new Int32Array([value, value, value, value]).buffer);
  return s(simd.const, ...bytes);
}

/** Pushes e^(local x) (x already clamped to ±87), using locals k and r as temporaries. */
export function exp(x: number, k: number, r: number): number[] {
  const code = [...get(x), ...f32x4(Math.LOG2E), ...s(simd.f32x4Mul), ...s(simd.f32x4Nearest), ...set(k)];
  code.push(...get(x), ...get(k), ...f32x4(0.693359375), ...s(simd.f32x4Mul), ...s(simd.f32x4Sub));
  code.push(...get(k), ...f32x4(-2.1219444e-4), ...s(simd.f32x4Mul), ...s(simd.f32x4Sub), ...set(r));
  const coefficients = [1 / 5040, 1 / 720, 1 / 120, 1 / 24, 1 / 6, 1 / 2, 1, 1];
  code.push(...f32x4(coefficients[0] as number));
  for (const c of coefficients.slice(1)) {
    code.push(...get(r), ...s(simd.f32x4Mul), ...f32x4(c), ...s(simd.f32x4Add));
  }
  code.push(...get(k), ...s(simd.i32x4TruncSatF32x4S), ...i32x4(127), ...s(simd.i32x4Add));
  code.push(0x41, 23, ...s(simd.i32x4Shl), ...s(simd.f32x4Mul));
  return code;
}
