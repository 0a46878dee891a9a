/**
 * Copies head slices from staged remote blocks into local KV blocks. Both use the layout
 * [2 (K,V)][blockSize][heads][headSize] per block; only the number of heads differs, so
 * each (K/V, token, head) is one contiguous run of headSize elements.
 */

export interface BlockShape {
  readonly blockSize: number;
  /** Bytes of one head of one token (headSize × element bytes). */
  readonly headBytes: number;
}

/** One local head filled from one staged block: local head `localIndex` ← remote `remoteIndex`. */
export interface HeadCopy {
  readonly localIndex: number;
  readonly remoteIndex: number;
}

export function scatterHeads(
  shape: BlockShape,
  src: Uint8Array,
  srcOffset: number,
  srcHeads: number,
  dst: Uint8Array,
  dstOffset: number,
  dstHeads: number,
  copies: readonly HeadCopy[],
): void {
  const { blockSize, headBytes } = shape;
  const rows = 2 * blockSize;
  for (let row = 0; row < rows; row++) {
    const srcRow = srcOffset + row * srcHeads * headBytes;
    const dstRow = dstOffset + row * dstHeads * headBytes;
    for (const c of copies) {
      const from = srcRow + c.remoteIndex * headBytes;
      dst.set(src.subarray(from, from + headBytes), dstRow + c.localIndex * headBytes);
    }
  }
}
