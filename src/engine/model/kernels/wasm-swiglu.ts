/**
 * The SwiGLU activation, out = silu(gate) · up = gate · up / (1 + e^(−gate)), as a
 * WebAssembly SIMD function emitted at run time like the matmul module. exp is evaluated
 * four lanes at a time: e^x = 2^k · p(r) with k = round(x · log₂e), r = x − k · ln 2
 * (ln 2 split in two for float32 accuracy) and p a degree-7 Taylor polynomial (relative
 * error < 1e-7 on |r| ≤ ln2 / 2); 2^k is built from its exponent bits. Plain Math.exp was
 * a visible share of a prefill step's CPU time.
 *
 * Export: swiglu(gate, up, out, bytes): byte offsets, `bytes` a multiple of 16.
 */
import {
  f32x4,
  get,
  I32,
  i32c,
  memoryModule,
  op,
  set,
  simd,
  simdOp,
  uleb,
  V128,
} from '../../../util/wasm-encoding.ts';
import { exp } from './wasm-simd-ops.ts';

const GATE = 0;
const UP = 1;
const OUT = 2;
const BYTES = 3;
const I = 4;
const G = 5;
const X = 6;
const K = 7;
const R = 8;
const E = 9;

function body(): number[] {
  const loadAt = (base: number) => [...get(base), ...get(I), op.i32Add, ...simdOp(simd.load, 0, 0)];
  const code: number[] = [op.block, 0x40, op.loop, 0x40];
  code.push(...get(I), ...get(BYTES), op.i32GeS, op.brIf, 1);
  code.push(...loadAt(GATE), ...set(G));
  code.push(...get(G), ...simdOp(simd.f32x4Neg), ...f32x4(87), ...simdOp(simd.f32x4Min), ...f32x4(-87));
  code.push(...simdOp(simd.f32x4Max), ...set(X), ...exp(X, K, R), ...set(E));
  code.push(...get(OUT), ...get(I), op.i32Add);
  code.push(...get(G), ...loadAt(UP), ...simdOp(simd.f32x4Mul));
  code.push(...f32x4(1), ...get(E), ...simdOp(simd.f32x4Add), ...simdOp(simd.f32x4Div));
  code.push(...simdOp(simd.store, 0, 0));
  code.push(...get(I), ...i32c(16), op.i32Add, ...set(I), op.br, 0, op.end, op.end, op.end);
  const locals = [2, 1, I32, 5, V128];
  const full = [...locals, ...code];
  return [...uleb(full.length), ...full];
}

export function assembleSwigluModule(): Uint8Array {
  return memoryModule([I32, I32, I32, I32], [{ name: 'swiglu', body: body() }]);
}
