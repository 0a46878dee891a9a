/**
 * Softmax of one contiguous float32 row, in place, as a WebAssembly SIMD function emitted at
 * run time like the matmul module: the row's maximum, e^(x − max) four lanes at a time (the
 * polynomial exp of wasm-simd-ops.ts, the last 1–3 elements through lane 0 of the same
 * code), their sum, then a multiply by 1/sum. Prefill attention called Math.exp once per
 * visible score, which was a large share of a prefill once the matmul ran natively.
 *
 * Export: softmax(ptr, count): byte offset of the row, count ≥ 1 elements.
 */
import {
  F32,
  f32x4,
  get,
  I32,
  memoryModule,
  op,
  set,
  simd,
  simdOp,
  sleb,
  uleb,
  V128,
} from '../../../util/wasm-encoding.ts';
import { exp } from './wasm-simd-ops.ts';

// Parameters, then locals.
const PTR = 0;
const COUNT = 1;
const I = 2;
const VEND = 3;
const END = 4;
const M = 5;
const SUM = 6;
const INV = 7;
const ACC = 8;
const X = 9;
const K = 10;
const R = 11;
const E = 12;
const VM = 13;

function f32(value: number): number[] {
  return [op.f32Const, ...new Uint8Array(new Float32Array([value]).buffer)];
}

const address = (): number[] => [...get(PTR), ...get(I), op.i32Add];
const lane = (local: number, n: number): number[] => [...get(local), ...simdOp(simd.f32x4ExtractLane, n)];

/** `while (i < limit) { body; i += step }` */
function loop(limit: number, step: number, body: number[]): number[] {
  return [
    op.block,
    0x40,
    op.loop,
    0x40,
    ...get(I),
    ...get(limit),
    op.i32GeS,
    op.brIf,
    1,
    ...body,
    ...get(I),
    op.i32Const,
    ...sleb(step),
    op.i32Add,
    ...set(I),
    op.br,
    0,
    op.end,
    op.end,
  ];
}

const resetI = (): number[] => [op.i32Const, 0, ...set(I)];
/** x = max(v − vm, −87), then e = e^x. */
const shiftedExp = (): number[] => [
  ...get(VM),
  ...simdOp(simd.f32x4Sub),
  ...f32x4(-87),
  ...simdOp(simd.f32x4Max),
  ...set(X),
  ...exp(X, K, R),
  ...set(E),
];

function body(): number[] {
  const code: number[] = [];
  code.push(...get(COUNT), op.i32Const, 2, op.i32Shl, ...set(END));
  code.push(...get(END), op.i32Const, ...sleb(-16), op.i32And, ...set(VEND));
  // Pass 1: the maximum.
  code.push(...f32x4(Number.NEGATIVE_INFINITY), ...set(ACC), ...resetI());
  code.push(
    ...loop(VEND, 16, [
      ...get(ACC),
      ...address(),
      ...simdOp(simd.load, 0, 0),
      ...simdOp(simd.f32x4Max),
      ...set(ACC),
    ]),
  );
  code.push(...lane(ACC, 0), ...lane(ACC, 1), op.f32Max, ...lane(ACC, 2), op.f32Max, ...lane(ACC, 3));
  code.push(op.f32Max, ...set(M));
  code.push(...loop(END, 4, [...get(M), ...address(), op.f32Load, 2, 0, op.f32Max, ...set(M)]));
  code.push(...get(M), ...simdOp(simd.f32x4Splat), ...set(VM));
  // Pass 2: e^(x − max) in place, and the sum.
  code.push(...f32x4(0), ...set(ACC), ...resetI());
  code.push(
    ...loop(VEND, 16, [
      ...address(),
      ...simdOp(simd.load, 0, 0),
      ...shiftedExp(),
      ...address(),
      ...get(E),
      ...simdOp(simd.store, 0, 0),
      ...get(ACC),
      ...get(E),
      ...simdOp(simd.f32x4Add),
      ...set(ACC),
    ]),
  );
  code.push(...lane(ACC, 0), ...lane(ACC, 1), op.f32Add, ...lane(ACC, 2), op.f32Add, ...lane(ACC, 3));
  code.push(op.f32Add, ...set(SUM));
  code.push(
    ...loop(END, 4, [
      ...address(),
      op.f32Load,
      2,
      0,
      ...simdOp(simd.f32x4Splat),
      ...shiftedExp(),
      ...address(),
      ...lane(E, 0),
      op.f32Store,
      2,
      0,
      ...get(SUM),
      ...lane(E, 0),
      op.f32Add,
      ...set(SUM),
    ]),
  );
  // Pass 3: scale by 1/sum.
  code.push(
    ...f32(1),
    ...get(SUM),
    op.f32Div,
    ...set(INV),
    ...get(INV),
    ...simdOp(simd.f32x4Splat),
    ...set(VM),
  );
  code.push(...resetI());
  code.push(
    ...loop(VEND, 16, [
      ...address(),
      ...address(),
      ...simdOp(simd.load, 0, 0),
      ...get(VM),
      ...simdOp(simd.f32x4Mul),
      ...simdOp(simd.store, 0, 0),
    ]),
  );
  code.push(
    ...loop(END, 4, [
      ...address(),
      ...address(),
      op.f32Load,
      2,
      0,
      ...get(INV),
      op.f32Mul,
      op.f32Store,
      2,
      0,
    ]),
  );
  code.push(op.end);
  const locals = [3, 3, I32, 3, F32, 6, V128];
  const full = [...locals, ...code];
  return [...uleb(full.length), ...full];
}

export function assembleSoftmaxModule(): Uint8Array {
  return memoryModule([I32, I32], [{ name: 'softmax', body: body() }]);
}
