/**
 * Emits the bytes of the matmul WebAssembly module at run time (no build step, no
 * toolchain), with the encoding of src/util/wasm-encoding.ts.
 *
 * Exports mm1..mm4(a, b, c, k, n4, lda, ldb, ldc): for R = 1..4 rows of A (row stride
 * lda bytes) times B (k rows, row stride ldb bytes) into C (row stride ldc bytes), over
 * the first n4 bytes of columns (a multiple of 16), with R×12 f32x4 register tiles then
 * 4-column tiles. All pointers are byte offsets; k must be at least 1.
 */
import {
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

// Parameter and local indices of every kernel function.
const A = 0;
const B = 1;
const C = 2;
const K = 3;
const N4 = 4;
const LDA = 5;
const LDB = 6;
const LDC = 7;
const J = 8;
const KK = 9;
const BP = 10;
const AP0 = 11;
const CP = 15;
const NUM_I32_LOCALS = 8;
const FIRST_V128 = 16;

/** One pass over column tiles of `vectors` × 4 floats, for `rows` rows. */
function columnTiles(rows: number, vectors: number): number[] {
  const acc = (r: number, v: number) => FIRST_V128 + r * 4 + v;
  const vb = (v: number) => FIRST_V128 + 16 + v;
  const va = FIRST_V128 + 20;
  const width = vectors * 16;
  const code: number[] = [op.block, 0x40, op.loop, 0x40];
  code.push(...get(J), op.i32Const, ...sleb(width), op.i32Add, ...get(N4), op.i32GtS, op.brIf, 1);
  for (let r = 0; r < rows; r++) {
    for (let v = 0; v < vectors; v++)
      code.push(...simdOp(simd.const, ...new Array(16).fill(0)), ...set(acc(r, v)));
  }
  code.push(...get(A), ...set(AP0));
  for (let r = 1; r < rows; r++) code.push(...get(AP0 + r - 1), ...get(LDA), op.i32Add, ...set(AP0 + r));
  code.push(...get(B), ...get(J), op.i32Add, ...set(BP), ...get(K), ...set(KK));
  code.push(op.loop, 0x40);
  for (let v = 0; v < vectors; v++)
    code.push(...get(BP), ...simdOp(simd.load, 0, ...uleb(v * 16)), ...set(vb(v)));
  for (let r = 0; r < rows; r++) {
    code.push(...get(AP0 + r), op.f32Load, 0, 0, ...simdOp(simd.f32x4Splat), ...set(va));
    for (let v = 0; v < vectors; v++) {
      code.push(
        ...get(acc(r, v)),
        ...get(va),
        ...get(vb(v)),
        ...simdOp(simd.f32x4Mul),
        ...simdOp(simd.f32x4Add),
        ...set(acc(r, v)),
      );
    }
  }
  for (let r = 0; r < rows; r++) code.push(...get(AP0 + r), op.i32Const, 4, op.i32Add, ...set(AP0 + r));
  code.push(...get(BP), ...get(LDB), op.i32Add, ...set(BP));
  code.push(...get(KK), op.i32Const, 1, op.i32Sub, op.localTee, ...uleb(KK), op.brIf, 0, op.end);
  code.push(...get(C), ...get(J), op.i32Add, ...set(CP));
  for (let r = 0; r < rows; r++) {
    for (let v = 0; v < vectors; v++)
      code.push(...get(CP), ...get(acc(r, v)), ...simdOp(simd.store, 0, ...uleb(v * 16)));
    if (r < rows - 1) code.push(...get(CP), ...get(LDC), op.i32Add, ...set(CP));
  }
  code.push(...get(J), op.i32Const, ...sleb(width), op.i32Add, ...set(J), op.br, 0, op.end, op.end);
  return code;
}

/**
 * f32x4 vectors per row of the wide register tile. 4 rows × 3 vectors keeps the 12
 * accumulators, 3 B vectors and the A splat within x86-64's 16 SIMD registers; 4 × 4 (21
 * live vectors) spills and measured slower on the model's shapes (docs/model.md, "Kernels").
 */
export const WIDE_TILE_VECTORS = 3;

function kernelBody(rows: number, wideVectors: number): number[] {
  const locals = [2, ...uleb(NUM_I32_LOCALS), I32, ...uleb(21), V128];
  const code = [...columnTiles(rows, wideVectors), ...columnTiles(rows, 1), op.end];
  const body = [...locals, ...code];
  return [...uleb(body.length), ...body];
}

/** The complete module bytes. */
export function assembleMatmulModule(wideVectors = WIDE_TILE_VECTORS): Uint8Array {
  return memoryModule(
    new Array(8).fill(I32),
    [1, 2, 3, 4].map((r) => ({ name: `mm${r}`, body: kernelBody(r, wideVectors) })),
  );
}
