/**
 * Emits, at run time, the bytes of a tiny WebAssembly SIMD module (no toolchain, no build
 * step): memory 0 holds 32 u32 lanes of hash state at byte 0 and a data scratch area at
 * DATA_OFFSET. `update(len)` folds [DATA_OFFSET, DATA_OFFSET+len) (len a multiple of 128)
 * into the state, word i into lane i mod 32, with the per-lane step
 *
 *   lane = imul(lane ^ word, PRIME);  lane ^= lane >>> 15
 *
 * as eight i32x4 accumulators. Each step is a bijection of the lane for a fixed word, so a
 * change confined to one 4-byte word always changes that lane's final value.
 * checksum-reference.ts is the same function in plain JS (fallback and test oracle).
 */
import {
  get,
  I32,
  i32c,
  MODULE_HEADER,
  name,
  op,
  section,
  set,
  simd,
  simdOp,
  uleb,
  V128,
  vec,
} from '../util/wasm-encoding.ts';

export const STATE_LANES = 32;
export const STRIPE_BYTES = STATE_LANES * 4;
export const DATA_OFFSET = 256;
export const LANE_PRIME = 0x85ebca77;
export const SCRATCH_BYTES = 64 << 10;
const PAGES = Math.ceil((DATA_OFFSET + SCRATCH_BYTES) / 65536);

const load = (offset: number): number[] => simdOp(simd.load, 4, ...uleb(offset));
const store = (offset: number): number[] => simdOp(simd.store, 4, ...uleb(offset));

/** update(len): params len(0); locals p(1), prime(2: v128), a0..a7(3..10: v128). */
function updateBody(): number[] {
  const LEN = 0;
  const P = 1;
  const PRIME = 2;
  const acc = (k: number): number => 3 + k;
  const code: number[] = [];
  code.push(...i32c(LANE_PRIME), ...simdOp(simd.i32x4Splat), ...set(PRIME));
  for (let k = 0; k < 8; k++) code.push(...i32c(0), ...load(16 * k), ...set(acc(k)));
  code.push(...i32c(DATA_OFFSET), ...set(P));
  code.push(...get(LEN), ...i32c(DATA_OFFSET), op.i32Add, ...set(LEN)); // len := end address
  code.push(op.block, 0x40, op.loop, 0x40);
  code.push(...get(P), ...get(LEN), op.i32GeU, op.brIf, 1); // leave when p >= end
  for (let k = 0; k < 8; k++) {
    code.push(...get(acc(k)), ...get(P), ...load(16 * k), ...simdOp(simd.v128Xor));
    code.push(...get(PRIME), ...simdOp(simd.i32x4Mul), ...set(acc(k)));
    code.push(
      ...get(acc(k)),
      ...get(acc(k)),
      ...i32c(15),
      ...simdOp(simd.i32x4ShrU),
      ...simdOp(simd.v128Xor),
    );
    code.push(...set(acc(k)));
  }
  code.push(...get(P), ...i32c(STRIPE_BYTES), op.i32Add, ...set(P), op.br, 0); // p += 128
  code.push(op.end, op.end);
  for (let k = 0; k < 8; k++) code.push(...i32c(0), ...get(acc(k)), ...store(16 * k));
  code.push(op.end);
  const locals = vec([
    [1, I32],
    [9, V128],
  ]);
  const body = [...locals, ...code];
  return [...uleb(body.length), ...body];
}

export function hashModuleBytes(): Uint8Array {
  const bytes = [
    ...MODULE_HEADER,
    ...section(1, vec([[0x60, 1, I32, 0]])), // type 0: (i32) -> ()
    ...section(3, vec([[0]])), // func 0 has type 0
    ...section(5, vec([[0x00, ...uleb(PAGES)]])), // memory 0: min PAGES
    ...section(
      7,
      vec([
        [...name('mem'), 0x02, 0],
        [...name('update'), 0x00, 0],
      ]),
    ),
    ...section(10, vec([updateBody()])),
  ];
  return new Uint8Array(bytes);
}
