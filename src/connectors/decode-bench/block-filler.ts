/**
 * Writes synthetic KV values into blocks of the paged memory: a constant (std 0), or values
 * from a normal distribution drawn by a small seeded generator, so runs are reproducible.
 */

import type { KVCacheDtype } from '../../config/types.ts';
import { f32ToBf16Bits, f32ToF16Bits } from '../../kv/dtype.ts';
import type { PagedKVMemory } from '../../kv/interfaces.ts';
import { mulberry32 } from '../../util/mulberry32.ts';

function writeValue(view: DataView, index: number, value: number, dtype: KVCacheDtype): void {
  if (dtype === 'float32') view.setFloat32(index * 4, value, true);
  else if (dtype === 'float16') view.setUint16(index * 2, f32ToF16Bits(value), true);
  else view.setUint16(index * 2, f32ToBf16Bits(value), true);
}

export class BlockFiller {
  readonly #memory: PagedKVMemory;
  readonly #mean: number;
  readonly #std: number;
  readonly #uniform: () => number;
  readonly #constantBlocks = new Map<number, Uint8Array>();

  constructor(memory: PagedKVMemory, mean: number, std: number, seed: number) {
    this.#memory = memory;
    this.#mean = mean;
    this.#std = std;
    this.#uniform = mulberry32(seed);
  }

  #normal(): number {
    const u = 1 - this.#uniform();
    const v = this.#uniform();
    return this.#mean + this.#std * Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  }

  #fillBytes(bytes: Uint8Array, value: () => number): void {
    const dtype = this.#memory.dtype;
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const count = bytes.byteLength / (dtype === 'float32' ? 4 : 2);
    for (let i = 0; i < count; i++) writeValue(view, i, value(), dtype);
  }

  #constantBlock(blockBytes: number): Uint8Array {
    let block = this.#constantBlocks.get(blockBytes);
    if (!block) {
      block = new Uint8Array(blockBytes);
      this.#fillBytes(block, () => this.#mean);
      this.#constantBlocks.set(blockBytes, block);
    }
    return block;
  }

  /** Fills `blockId` of the tensor holding `layerName`. */
  fill(layerName: string, blockId: number): void {
    const tensor = this.#memory.tensorIndexOfLayer(layerName);
    const target = this.#memory.blockRange(tensor, blockId, 1);
    if (this.#std === 0) target.set(this.#constantBlock(target.byteLength));
    else this.#fillBytes(target, () => this.#normal());
  }
}
