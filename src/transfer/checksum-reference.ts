/**
 * The block hash of checksum.ts in plain JS: the fallback where WebAssembly SIMD is not
 * available, and the oracle the tests compare the WASM path against. Same lanes, same
 * step, same zero padding of the last stripe, same fold.
 */
import { LANE_PRIME, STATE_LANES, STRIPE_BYTES } from './wasm-hash-module.ts';

/** Initial lane values: distinct per lane so equal words in different lanes differ. */
export function initLanes(lanes: Uint32Array): void {
  for (let j = 0; j < STATE_LANES; j++) lanes[j] = Math.imul(j + 1, 0x9e3779b1) ^ 0x5bd1e995;
}

function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/**
 * Folds the 32 lanes and the byte length into a 53-bit integer (exact in a JS number and
 * in JSON). The low 32 bits XOR one bijective mix per lane, so a change in any single
 * lane always changes them; the high 21 bits are an independent mix of all lanes.
 */
export function foldLanes(lanes: Uint32Array, length: number): number {
  let lo = length >>> 0;
  let hi = Math.floor(length / 2 ** 32);
  for (let j = 0; j < STATE_LANES; j++) {
    const v = lanes[j]!;
    lo ^= fmix(v ^ Math.imul(j + 1, 0x27d4eb2f));
    hi = (Math.imul(hi ^ fmix(v + j), 0x165667b1) + 1) | 0;
  }
  return (fmix(hi) & 0x1fffff) * 2 ** 32 + (lo >>> 0);
}

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/** One lane step over the little-endian words of `bytes` (length a multiple of STRIPE_BYTES). */
function stepStripes(lanes: Uint32Array, bytes: Uint8Array): void {
  const length = bytes.length;
  if (LITTLE_ENDIAN && bytes.byteOffset % 4 === 0) {
    const words = new Uint32Array(bytes.buffer, bytes.byteOffset, length / 4);
    for (let i = 0; i < words.length; i += STATE_LANES) {
      for (let j = 0; j < STATE_LANES; j++) {
        let h = Math.imul(lanes[j]! ^ words[i + j]!, LANE_PRIME);
        h ^= h >>> 15;
        lanes[j] = h;
      }
    }
    return;
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, length);
  for (let i = 0; i < length; i += STRIPE_BYTES) {
    for (let j = 0; j < STATE_LANES; j++) {
      let h = Math.imul(lanes[j]! ^ view.getUint32(i + 4 * j, true), LANE_PRIME);
      h ^= h >>> 15;
      lanes[j] = h;
    }
  }
}

export function referenceHash(bytes: Uint8Array): number {
  const lanes = new Uint32Array(STATE_LANES);
  initLanes(lanes);
  const whole = bytes.length - (bytes.length % STRIPE_BYTES);
  stepStripes(lanes, bytes.subarray(0, whole));
  if (whole < bytes.length) {
    const tail = new Uint8Array(STRIPE_BYTES);
    tail.set(bytes.subarray(whole));
    stepStripes(lanes, tail);
  }
  return foldLanes(lanes, bytes.length);
}
