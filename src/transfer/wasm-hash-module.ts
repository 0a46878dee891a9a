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
export const STATE_LANES = 32;
export const STRIPE_BYTES = STATE_LANES * 4;
export const DATA_OFFSET = 256;
export const LANE_PRIME = 0x85ebca77;
export const SCRATCH_BYTES = 64 << 10;
const PAGES = Math.ceil((DATA_OFFSET + SCRATCH_BYTES) / 65536);

const I32 = 0x7f;
const V128 = 0x7b;

function uleb(n: number): number[] {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n !== 0) b |= 0x80;
    out.push(b);
  } while (n !== 0);
  return out;
}

function sleb(n: number): number[] {
  const out: number[] = [];
  for (;;) {
    const b = n & 0x7f;
    n >>= 7;
    if ((n === 0 && (b & 0x40) === 0) || (n === -1 && (b & 0x40) !== 0)) {
      out.push(b);
      return out;
    }
    out.push(b | 0x80);
  }
}

const section = (id: number, body: number[]): number[] => [id, ...uleb(body.length), ...body];
const name = (s: string): number[] => [...uleb(s.length), ...[...s].map((c) => c.charCodeAt(0))];
const vec = (items: number[][]): number[] => [...uleb(items.length), ...items.flat()];

const get = (i: number): number[] => [0x20, ...uleb(i)];
const set = (i: number): number[] => [0x21, ...uleb(i)];
const i32c = (v: number): number[] => [0x41, ...sleb(v | 0)];
const simd = (op: number, ...imm: number[]): number[] => [0xfd, ...uleb(op), ...imm];
const load = (offset: number): number[] => simd(0x00, 4, ...uleb(offset));
const store = (offset: number): number[] => simd(0x0b, 4, ...uleb(offset));
const V128_XOR = 0x51;
const I32X4_SPLAT = 0x11;
const I32X4_SHR_U = 0xad;
const I32X4_MUL = 0xb5;

/** update(len): params len(0); locals p(1), prime(2: v128), a0..a7(3..10: v128). */
function updateBody(): number[] {
  const LEN = 0;
  const P = 1;
  const PRIME = 2;
  const acc = (k: number): number => 3 + k;
  const code: number[] = [];
  code.push(...i32c(LANE_PRIME), ...simd(I32X4_SPLAT), ...set(PRIME));
  for (let k = 0; k < 8; k++) code.push(...i32c(0), ...load(16 * k), ...set(acc(k)));
  code.push(...i32c(DATA_OFFSET), ...set(P));
  code.push(...get(LEN), ...i32c(DATA_OFFSET), 0x6a, ...set(LEN)); // len := end address
  code.push(0x02, 0x40, 0x03, 0x40); // block, loop
  code.push(...get(P), ...get(LEN), 0x4f, 0x0d, 1); // br_if 1 when p >= end
  for (let k = 0; k < 8; k++) {
    code.push(...get(acc(k)), ...get(P), ...load(16 * k), ...simd(V128_XOR));
    code.push(...get(PRIME), ...simd(I32X4_MUL), ...set(acc(k)));
    code.push(...get(acc(k)), ...get(acc(k)), ...i32c(15), ...simd(I32X4_SHR_U), ...simd(V128_XOR));
    code.push(...set(acc(k)));
  }
  code.push(...get(P), ...i32c(STRIPE_BYTES), 0x6a, ...set(P), 0x0c, 0); // p += 128; br loop
  code.push(0x0b, 0x0b); // end loop, end block
  for (let k = 0; k < 8; k++) code.push(...i32c(0), ...get(acc(k)), ...store(16 * k));
  code.push(0x0b);
  const locals = vec([
    [1, I32],
    [9, V128],
  ]);
  const body = [...locals, ...code];
  return [...uleb(body.length), ...body];
}

export function hashModuleBytes(): Uint8Array {
  const bytes = [
    ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00],
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
