/**
 * Element access to one layer's tensor of the paged KV memory, layout
 * [numBlocks][2 (K,V)][blockSize][numKvHeads][headSize]. float32 is read and written in
 * place through a Float32Array view; float16/bfloat16 are converted element by element.
 */

import type { KVCacheDtype } from '../../config/types.ts';
import { decoderFor, encoderFor } from '../../kv/dtype.ts';
import type { PagedKVMemory } from '../../kv/interfaces.ts';

export interface LayerKV {
  readonly dtype: KVCacheDtype;
  readonly f32: Float32Array | null;
  readonly u16: Uint16Array | null;
  readonly blockSize: number;
  /** Floats in one token's K (or V) row: numKvHeads × headSize. */
  readonly rowSize: number;
  readonly group: number;
}

const views = new WeakMap<
  PagedKVMemory,
  Map<number, { f32: Float32Array | null; u16: Uint16Array | null }>
>();

export function layerKV(kv: PagedKVMemory, layerName: string, rowSize: number): LayerKV {
  const ti = kv.tensorIndexOfLayer(layerName);
  const group = kv.groupOfLayer(layerName);
  const blockSize = (kv.kvCacheConfig.groups[group] as { spec: { blockSize: number } }).spec.blockSize;
  let perMemory = views.get(kv);
  if (perMemory === undefined) {
    perMemory = new Map();
    views.set(kv, perMemory);
  }
  let v = perMemory.get(ti);
  if (v === undefined) {
    const bytes = (kv.tensors[ti] as { bytes: Uint8Array }).bytes;
    v =
      kv.dtype === 'float32'
        ? { f32: new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 2), u16: null }
        : { f32: null, u16: new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 1) };
    perMemory.set(ti, v);
  }
  return { dtype: kv.dtype, f32: v.f32, u16: v.u16, blockSize, rowSize, group };
}

/** Element offset of the K row of `position` (the V row is blockSize × rowSize further). */
export function kRowOffset(layer: LayerKV, blockTable: readonly number[], position: number): number {
  const bs = layer.blockSize;
  const block = blockTable[Math.floor(position / bs)];
  if (block === undefined)
    throw new RangeError(`position ${position} is beyond the block table (${blockTable.length} blocks)`);
  return (block * 2 * bs + (position % bs)) * layer.rowSize;
}

export function writeRow(layer: LayerKV, dst: number, src: Float32Array, srcOff: number, n: number): void {
  const f32 = layer.f32;
  if (f32 !== null) {
    // A plain loop: rows are short (numKvHeads × headSize), a subarray per row costs more.
    for (let i = 0; i < n; i++) f32[dst + i] = src[srcOff + i] as number;
    return;
  }
  const u16 = layer.u16 as Uint16Array;
  const conv = encoderFor(layer.dtype as 'float16' | 'bfloat16');
  for (let i = 0; i < n; i++) u16[dst + i] = conv(src[srcOff + i] as number);
}

export function readElement(layer: LayerKV, offset: number): number {
  if (layer.f32 !== null) return layer.f32[offset] as number;
  const bits = (layer.u16 as Uint16Array)[offset] as number;
  return decoderFor(layer.dtype as 'float16' | 'bfloat16')(bits);
}

/**
 * Walks positions lo..hi (inclusive) of a sequence block by block: for each touched block,
 * `visit(from, first, count)` gets the float offset of position `first`'s K row in the
 * layer's buffer and the number of consecutive positions in that block (their rows are
 * contiguous, V rows at the same offsets plus the layer's V shift).
 */
export function forEachBlockRun(
  blockTable: readonly number[],
  blockSize: number,
  rowSize: number,
  lo: number,
  hi: number,
  visit: (from: number, first: number, count: number) => void,
): void {
  for (let b = Math.floor(lo / blockSize); b * blockSize <= hi; b++) {
    const block = blockTable[b];
    if (block === undefined) {
      throw new RangeError(
        `position ${b * blockSize} is beyond the block table (${blockTable.length} blocks)`,
      );
    }
    const j0 = Math.max(lo, b * blockSize);
    const j1 = Math.min(hi, b * blockSize + blockSize - 1);
    visit((block * 2 * blockSize + (j0 - b * blockSize)) * rowSize, j0, j1 - j0 + 1);
  }
}
