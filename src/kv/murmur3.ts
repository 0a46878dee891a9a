/**
 * MurmurHash3 x86_128 (Austin Appleby's public-domain design), pure 32-bit arithmetic so it
 * runs fast in JavaScript without BigInt or native code. kvconnect uses it for the
 * `xxhash`/`xxhash_cbor` algorithm names: a fast, NON-cryptographic, in-process-only hash.
 * It is not xxHash: keys made with it never match vLLM's xxhash keys.
 */
const C1 = 0x239b961b;
const C2 = 0xab0e9789;
const C3 = 0x38b34ae5;
const C4 = 0xa1e38b93;

function rotl(x: number, r: number): number {
  return (x << r) | (x >>> (32 - r));
}

function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h;
}

function word(d: Uint8Array, i: number): number {
  return d[i]! | (d[i + 1]! << 8) | (d[i + 2]! << 16) | (d[i + 3]! << 24);
}

/** Returns 16 bytes: h1..h4, each little-endian (the reference implementation's output order). */
export function murmur3x86_128(data: Uint8Array, seed = 0): Uint8Array {
  let h1 = seed | 0;
  let h2 = h1;
  let h3 = h1;
  let h4 = h1;
  const len = data.length;
  const blocksEnd = len - (len % 16);
  for (let i = 0; i < blocksEnd; i += 16) {
    let k1 = word(data, i);
    let k2 = word(data, i + 4);
    let k3 = word(data, i + 8);
    let k4 = word(data, i + 12);
    k1 = Math.imul(rotl(Math.imul(k1, C1), 15), C2);
    h1 ^= k1;
    h1 = (Math.imul(rotl(h1, 19) + h2, 5) + 0x561ccd1b) | 0;
    k2 = Math.imul(rotl(Math.imul(k2, C2), 16), C3);
    h2 ^= k2;
    h2 = (Math.imul(rotl(h2, 17) + h3, 5) + 0x0bcaa747) | 0;
    k3 = Math.imul(rotl(Math.imul(k3, C3), 17), C4);
    h3 ^= k3;
    h3 = (Math.imul(rotl(h3, 15) + h4, 5) + 0x96cd1c35) | 0;
    k4 = Math.imul(rotl(Math.imul(k4, C4), 18), C1);
    h4 ^= k4;
    h4 = (Math.imul(rotl(h4, 13) + h1, 5) + 0x32ac3b17) | 0;
  }
  const tail = [0, 0, 0, 0];
  const rem = len - blocksEnd;
  for (let i = 0; i < rem; i++) tail[i >> 2]! ^= data[blocksEnd + i]! << (8 * (i & 3));
  if (rem > 12) h4 ^= Math.imul(rotl(Math.imul(tail[3]!, C4), 18), C1);
  if (rem > 8) h3 ^= Math.imul(rotl(Math.imul(tail[2]!, C3), 17), C4);
  if (rem > 4) h2 ^= Math.imul(rotl(Math.imul(tail[1]!, C2), 16), C3);
  if (rem > 0) h1 ^= Math.imul(rotl(Math.imul(tail[0]!, C1), 15), C2);
  h1 ^= len;
  h2 ^= len;
  h3 ^= len;
  h4 ^= len;
  h1 = (h1 + h2 + h3 + h4) | 0;
  h2 = (h2 + h1) | 0;
  h3 = (h3 + h1) | 0;
  h4 = (h4 + h1) | 0;
  h1 = fmix(h1);
  h2 = fmix(h2);
  h3 = fmix(h3);
  h4 = fmix(h4);
  h1 = (h1 + h2 + h3 + h4) | 0;
  h2 = (h2 + h1) | 0;
  h3 = (h3 + h1) | 0;
  h4 = (h4 + h1) | 0;
  const out = new Uint8Array(16);
  const view = new DataView(out.buffer);
  view.setUint32(0, h1 >>> 0, true);
  view.setUint32(4, h2 >>> 0, true);
  view.setUint32(8, h3 >>> 0, true);
  view.setUint32(12, h4 >>> 0, true);
  return out;
}
