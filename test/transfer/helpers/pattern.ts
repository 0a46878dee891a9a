/** Deterministic block contents shared by the tests and the child process. */
import { allocateShared } from '../../../src/util/shared-memory.ts';

export function fillPattern(bytes: Uint8Array, blockBytes: number, seed: number): void {
  const words = new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 2);
  let x = (seed * 0x9e3779b1) >>> 0 || 1;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    words[i] = (x + Math.floor((i * 4) / blockBytes)) >>> 0;
  }
}

/** A region in engine-like KV memory (a peer can map it when the native addon is built). */
export function makeRegion(id: number, blockBytes: number, numBlocks: number, seed: number) {
  const bytes = new Uint8Array(allocateShared(blockBytes * numBlocks));
  fillPattern(bytes, blockBytes, seed);
  return { id, bytes, blockBytes, numBlocks };
}

export function blocksEqual(
  a: Uint8Array,
  aFirst: number,
  b: Uint8Array,
  bFirst: number,
  count: number,
  blockBytes: number,
): boolean {
  return Buffer.from(a.subarray(aFirst * blockBytes, (aFirst + count) * blockBytes)).equals(
    b.subarray(bFirst * blockBytes, (bFirst + count) * blockBytes),
  );
}

/** Regions 0 and 1 of `numBlocks` blocks each, filled from `seed` and `seed + 1`. */
export function regionPair(blockBytes: number, numBlocks: number, seed: number) {
  return [makeRegion(0, blockBytes, numBlocks, seed), makeRegion(1, blockBytes, numBlocks, seed + 1)];
}
