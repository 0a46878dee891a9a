/**
 * WebAssembly binary encoding for the small modules kvconnect emits at run time (no
 * toolchain, no build step): the engine's matmul, SwiGLU and softmax kernels and the transfer
 * layer's block hash. LEB128 numbers, sections, names, the opcodes those modules use, and
 * the one module shape the kernels share. A leaf module, so both layers can use it.
 */

/** Value types. */
export const I32 = 0x7f;
export const F32 = 0x7d;
export const V128 = 0x7b;

/** Opcodes (the ones used). */
export const op = {
  block: 0x02,
  loop: 0x03,
  end: 0x0b,
  br: 0x0c,
  brIf: 0x0d,
  localGet: 0x20,
  localSet: 0x21,
  localTee: 0x22,
  f32Load: 0x2a,
  f32Store: 0x38,
  i32Const: 0x41,
  f32Const: 0x43,
  i32GtS: 0x4a,
  i32GeS: 0x4e,
  i32GeU: 0x4f,
  i32Add: 0x6a,
  i32Sub: 0x6b,
  i32And: 0x71,
  i32Shl: 0x74,
  f32Add: 0x92,
  f32Mul: 0x94,
  f32Div: 0x95,
  f32Max: 0x97,
  simd: 0xfd,
} as const;

/** SIMD opcodes (after the 0xfd prefix). */
export const simd = {
  load: 0x00,
  store: 0x0b,
  const: 0x0c,
  i32x4Splat: 0x11,
  f32x4Splat: 0x13,
  f32x4ExtractLane: 0x1f,
  v128Xor: 0x51,
  f32x4Nearest: 0x6a,
  i32x4Shl: 0xab,
  i32x4ShrU: 0xad,
  i32x4Add: 0xae,
  i32x4Mul: 0xb5,
  f32x4Neg: 0xe1,
  f32x4Add: 0xe4,
  f32x4Sub: 0xe5,
  f32x4Mul: 0xe6,
  f32x4Div: 0xe7,
  f32x4Min: 0xe8,
  f32x4Max: 0xe9,
  i32x4TruncSatF32x4S: 0xf8,
} as const;

export function uleb(n: number): number[] {
  const out: number[] = [];
  do {
    let byte = n & 0x7f;
    n >>>= 7;
    if (n !== 0) byte |= 0x80;
    out.push(byte);
  } while (n !== 0);
  return out;
}

export function sleb(n: number): number[] {
  const out: number[] = [];
  for (;;) {
    const byte = n & 0x7f;
    n >>= 7;
    if ((n === 0 && (byte & 0x40) === 0) || (n === -1 && (byte & 0x40) !== 0)) {
      out.push(byte);
      return out;
    }
    out.push(byte | 0x80);
  }
}

export function section(id: number, payload: number[]): number[] {
  return [id, ...uleb(payload.length), ...payload];
}

export function name(s: string): number[] {
  const bytes = [...new TextEncoder().encode(s)];
  return [...uleb(bytes.length), ...bytes];
}

/** A vector: its length, then its items. */
export const vec = (items: number[][]): number[] => [...uleb(items.length), ...items.flat()];

export const get = (i: number): number[] => [op.localGet, ...uleb(i)];
export const set = (i: number): number[] => [op.localSet, ...uleb(i)];
export const i32c = (v: number): number[] => [op.i32Const, ...sleb(v | 0)];
export const simdOp = (code: number, ...imm: number[]): number[] => [op.simd, ...uleb(code), ...imm];

export function f32x4(value: number): number[] {
  return simdOp(simd.const, ...new Uint8Array(new Float32Array([value, value, value, value]).buffer));
}

export function i32x4(value: number): number[] {
  return simdOp(simd.const, ...new Uint8Array(new Int32Array([value, value, value, value]).buffer));
}

export const MODULE_HEADER = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];

/**
 * A module that imports its memory (`env.memory`) and exports `functions`, all of one
 * signature: `params` value types, no results. Each body is already size-prefixed.
 */
export function memoryModule(params: number[], functions: { name: string; body: number[] }[]): Uint8Array {
  return new Uint8Array([
    ...MODULE_HEADER,
    ...section(1, [1, 0x60, ...uleb(params.length), ...params, 0]),
    ...section(2, [1, ...name('env'), ...name('memory'), 0x02, 0x00, 1]),
    ...section(3, [...uleb(functions.length), ...functions.map(() => 0)]),
    ...section(7, [
      ...uleb(functions.length),
      ...functions.flatMap((f, i) => [...name(f.name), 0x00, ...uleb(i)]),
    ]),
    ...section(10, [...uleb(functions.length), ...functions.flatMap((f) => f.body)]),
  ]);
}
