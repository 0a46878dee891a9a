/**
 * Paged KV memory of one rank: one SharedArrayBuffer per KV tensor (in memory a same-host
 * transfer peer can map, when the native addon is built: util/shared-memory.ts), layout
 * [numBlocks][2 (K,V)][blockSize][numKvHeads][headSize]. A token slot is
 * `blockId * blockSize + offsetInBlock` (vLLM's slot mapping). float32 memory hands out
 * Float32Array views for zero-copy attention; 16-bit dtypes convert on write and read.
 */

import type { KVCacheDtype } from '../config/types.ts';
import { KVError } from '../errors/index.ts';
import { allocateShared } from '../util/shared-memory.ts';
import { decoderFor, dtypeBytes, encoderFor } from './dtype.ts';
import type { KVCacheConfig, KVTensorBuffer, PagedKVMemory } from './interfaces.ts';

/** Element strides of the layout (in dtype elements, not bytes). */
export interface KVLayout {
  readonly blockSize: number;
  readonly numKvHeads: number;
  readonly headSize: number;
  /** numKvHeads × headSize: one token's K (or V). */
  readonly tokenStride: number;
  /** Offset of V from K inside a block: blockSize × tokenStride. */
  readonly vOffset: number;
  /** One block: 2 × vOffset. */
  readonly blockStride: number;
}

/** What a worker thread needs to rebuild the same memory (structured-clone-able). */
export interface PagedKVMemoryTransfer {
  kvCacheConfig: KVCacheConfig;
  dtype: KVCacheDtype;
  buffers: SharedArrayBuffer[];
}

export class SharedPagedKVMemory implements PagedKVMemory {
  readonly kvCacheConfig: KVCacheConfig;
  readonly dtype: KVCacheDtype;
  readonly numBlocks: number;
  readonly tensors: readonly KVTensorBuffer[];
  readonly layout: KVLayout;
  readonly #tensorOfLayer = new Map<string, number>();
  readonly #groupOfLayer = new Map<string, number>();
  readonly #f32: (Float32Array | null)[];
  readonly #u16: (Uint16Array | null)[];

  constructor(kvCacheConfig: KVCacheConfig, dtype: KVCacheDtype, buffers?: readonly SharedArrayBuffer[]) {
    const spec = kvCacheConfig.groups[0]?.spec;
    if (!spec)
      throw new KVError('KV_INVALID_SPEC', 'KVCacheConfig has no groups', {
        hint: 'Build it with buildKVCacheConfig().',
      });
    if (spec.dtype !== dtype) {
      throw new KVError(
        'KV_DTYPE_MISMATCH',
        `KV memory dtype ${dtype} differs from the KV cache spec dtype ${spec.dtype}`,
        {
          field: 'cache.cache_dtype',
          hint: 'Build the KVCacheConfig with the same dtype as the memory.',
        },
      );
    }
    this.kvCacheConfig = kvCacheConfig;
    this.dtype = dtype;
    this.numBlocks = kvCacheConfig.numBlocks;
    const tokenStride = spec.numKvHeads * spec.headSize;
    const vOffset = spec.blockSize * tokenStride;
    this.layout = {
      blockSize: spec.blockSize,
      numKvHeads: spec.numKvHeads,
      headSize: spec.headSize,
      tokenStride,
      vOffset,
      blockStride: 2 * vOffset,
    };
    const blockBytes = spec.pageSizeBytes;
    const size = blockBytes * this.numBlocks;
    if (buffers && buffers.length !== kvCacheConfig.tensors.length) {
      throw new KVError(
        'KV_BUFFER_MISMATCH',
        `expected ${kvCacheConfig.tensors.length} KV buffers, got ${buffers.length}`,
        {
          hint: 'Pass the buffers of toTransfer() of a memory built from the same KVCacheConfig.',
        },
      );
    }
    this.tensors = kvCacheConfig.tensors.map((t, index) => {
      const buffer = buffers?.[index] ?? allocateShared(size);
      if (buffer.byteLength !== size) {
        throw new KVError(
          'KV_BUFFER_MISMATCH',
          `KV buffer ${index} has ${buffer.byteLength} bytes, expected ${size}`,
          {
            hint: 'The buffers were built for a different KVCacheConfig (block count, dtype or geometry).',
          },
        );
      }
      for (const layer of t.sharedBy) this.#tensorOfLayer.set(layer, index);
      return {
        index,
        sharedBy: t.sharedBy,
        buffer,
        bytes: new Uint8Array(buffer),
        blockBytes,
        numBlocks: this.numBlocks,
      };
    });
    kvCacheConfig.groups.forEach((g, gi) => {
      for (const layer of g.layerNames) this.#groupOfLayer.set(layer, gi);
    });
    const elemBytes = dtypeBytes(dtype);
    this.#f32 = this.tensors.map((t) => (elemBytes === 4 ? new Float32Array(t.buffer) : null));
    this.#u16 = this.tensors.map((t) => (elemBytes === 2 ? new Uint16Array(t.buffer) : null));
  }

  tensorIndexOfLayer(layerName: string): number {
    const index = this.#tensorOfLayer.get(layerName);
    if (index === undefined) throw unknownLayer(layerName);
    return index;
  }

  groupOfLayer(layerName: string): number {
    const index = this.#groupOfLayer.get(layerName);
    if (index === undefined) throw unknownLayer(layerName);
    return index;
  }

  blockRange(tensorIndex: number, firstBlockId: number, count = 1): Uint8Array {
    const t = this.tensors[tensorIndex];
    if (!t)
      throw new KVError('KV_OUT_OF_RANGE', `no KV tensor ${tensorIndex}`, {
        hint: `Tensor indices are 0..${this.tensors.length - 1}.`,
      });
    this.#checkBlocks(firstBlockId, count);
    return new Uint8Array(t.buffer, firstBlockId * t.blockBytes, count * t.blockBytes);
  }

  /** Raw bytes of one block of one layer (K then V). */
  blockBytes(layerName: string, blockId: number): Uint8Array {
    return this.blockRange(this.tensorIndexOfLayer(layerName), blockId, 1);
  }

  /** float32 only: the whole tensor of a layer as elements, for kernels that index by layout. */
  float32View(layerName: string): Float32Array {
    const view = this.#f32[this.tensorIndexOfLayer(layerName)];
    if (!view) {
      throw new KVError(
        'KV_DTYPE_MISMATCH',
        `float32View needs a float32 KV cache, this one is ${this.dtype}`,
        {
          hint: 'Use readKV()/writeTokenKV(), which convert 16-bit dtypes.',
        },
      );
    }
    return view;
  }

  /** Element offset of K of a token slot; V is at `+ layout.vOffset`. */
  kOffsetOfSlot(slot: number): number {
    const { blockSize, blockStride, tokenStride } = this.layout;
    const block = Math.floor(slot / blockSize);
    return block * blockStride + (slot - block * blockSize) * tokenStride;
  }

  /** Writes one token's K and V (numKvHeads × headSize each) into a slot. */
  writeTokenKV(layerName: string, slot: number, k: ArrayLike<number>, v: ArrayLike<number>): void {
    const ti = this.tensorIndexOfLayer(layerName);
    this.#checkSlot(slot, k.length, v.length);
    const at = this.kOffsetOfSlot(slot);
    const f32 = this.#f32[ti];
    if (f32) {
      for (let i = 0; i < k.length; i++) f32[at + i] = k[i]!;
      const vat = at + this.layout.vOffset;
      for (let i = 0; i < v.length; i++) f32[vat + i] = v[i]!;
      return;
    }
    const u16 = this.#u16[ti]!;
    const toBits = encoderFor(this.dtype as 'float16' | 'bfloat16');
    for (let i = 0; i < k.length; i++) u16[at + i] = toBits(k[i]!);
    const vat = at + this.layout.vOffset;
    for (let i = 0; i < v.length; i++) u16[vat + i] = toBits(v[i]!);
  }

  /**
   * Gathers K and V of `slots` into `kOut`/`vOut`, each [slots.length][numKvHeads][headSize]
   * float32, converting 16-bit dtypes.
   */
  readKV(layerName: string, slots: ArrayLike<number>, kOut: Float32Array, vOut: Float32Array): void {
    const ti = this.tensorIndexOfLayer(layerName);
    const n = this.layout.tokenStride;
    if (kOut.length < slots.length * n || vOut.length < slots.length * n) {
      throw new KVError('KV_OUT_OF_RANGE', `readKV output arrays need ${slots.length * n} elements`, {
        hint: 'Size kOut and vOut as slots.length × numKvHeads × headSize.',
      });
    }
    const f32 = this.#f32[ti];
    const u16 = this.#u16[ti];
    const fromBits = f32 ? null : decoderFor(this.dtype as 'float16' | 'bfloat16');
    const vOff = this.layout.vOffset;
    for (let s = 0; s < slots.length; s++) {
      const slot = slots[s]!;
      this.#checkSlot(slot, n, n);
      const at = this.kOffsetOfSlot(slot);
      const out = s * n;
      if (f32) {
        kOut.set(f32.subarray(at, at + n), out);
        vOut.set(f32.subarray(at + vOff, at + vOff + n), out);
      } else {
        for (let i = 0; i < n; i++) {
          kOut[out + i] = fromBits!(u16![at + i]!);
          vOut[out + i] = fromBits!(u16![at + vOff + i]!);
        }
      }
    }
  }

  /** Zeroes whole blocks in every tensor (fresh blocks for a recompute, tests). */
  zeroBlocks(blockIds: Iterable<number>): void {
    for (const id of blockIds) for (const t of this.tensors) this.blockRange(t.index, id, 1).fill(0);
  }

  toTransfer(): PagedKVMemoryTransfer {
    return {
      kvCacheConfig: this.kvCacheConfig,
      dtype: this.dtype,
      buffers: this.tensors.map((t) => t.buffer),
    };
  }

  #checkBlocks(first: number, count: number): void {
    if (
      !Number.isInteger(first) ||
      !Number.isInteger(count) ||
      first < 0 ||
      count < 0 ||
      first + count > this.numBlocks
    ) {
      throw new KVError(
        'KV_OUT_OF_RANGE',
        `blocks ${first}..${first + count - 1} are outside 0..${this.numBlocks - 1}`,
        {
          hint: 'Block ids come from the KV cache manager of the same KVCacheConfig.',
        },
      );
    }
  }

  #checkSlot(slot: number, kLen: number, vLen: number): void {
    const n = this.layout.tokenStride;
    if (!Number.isInteger(slot) || slot < 0 || slot >= this.numBlocks * this.layout.blockSize) {
      throw new KVError('KV_OUT_OF_RANGE', `slot ${slot} is outside the KV cache`, {
        hint: 'A slot is blockId × blockSize + offset in block.',
      });
    }
    if (kLen !== n || vLen !== n) {
      throw new KVError('KV_OUT_OF_RANGE', `K/V of one token must have ${n} elements, got ${kLen}/${vLen}`, {
        hint: 'Pass numKvHeads × headSize values (per rank).',
      });
    }
  }
}

function unknownLayer(layerName: string): KVError {
  return new KVError('KV_UNKNOWN_LAYER', `layer ${layerName} has no KV cache`, {
    hint: 'Layer names are model.layers.<i>.self_attn.attn, as attentionLayerName(i) builds them.',
  });
}

export function createPagedKVMemory(kvCacheConfig: KVCacheConfig, dtype?: KVCacheDtype): SharedPagedKVMemory {
  return new SharedPagedKVMemory(kvCacheConfig, dtype ?? kvCacheConfig.groups[0]?.spec.dtype ?? 'float32');
}

/** Rebuilds the memory around buffers received from another thread (postMessage). */
export function pagedKVMemoryFromBuffers(transfer: PagedKVMemoryTransfer): SharedPagedKVMemory {
  return new SharedPagedKVMemory(transfer.kvCacheConfig, transfer.dtype, transfer.buffers);
}
