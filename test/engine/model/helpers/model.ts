/** Shared helpers of the model tests: paged KV memory and shuffled block tables. */
import type { HFModelConfig } from '../../../../src/config/model-presets.ts';
import type { KVCacheDtype } from '../../../../src/config/types.ts';
import { SeededRandom } from '../../../../src/engine/model/prng.ts';
import { buildKVCacheConfig } from '../../../../src/kv/kv-cache-config.ts';
import { SharedPagedKVMemory } from '../../../../src/kv/paged-memory.ts';

export function makeKV(
  config: HFModelConfig,
  options: { numBlocks?: number; blockSize?: number; dtype?: KVCacheDtype; tpSize?: number } = {},
): SharedPagedKVMemory {
  const kvc = buildKVCacheConfig({
    hfConfig: config,
    numBlocks: options.numBlocks ?? 256,
    blockSize: options.blockSize ?? 16,
    dtype: options.dtype ?? 'float32',
    tensorParallelSize: options.tpSize ?? 1,
    maxModelLen: 256,
  });
  return new SharedPagedKVMemory(kvc, options.dtype ?? 'float32');
}

/** Hands out distinct, shuffled (non-contiguous) block ids, never the null block 0. */
export class BlockAllocator {
  private readonly free: number[];

  constructor(numBlocks: number, seed: number) {
    const rng = new SeededRandom(seed);
    this.free = Array.from({ length: numBlocks - 1 }, (_, i) => i + 1);
    for (let i = this.free.length - 1; i > 0; i--) {
      const j = rng.nextUint32() % (i + 1);
      [this.free[i], this.free[j]] = [this.free[j] as number, this.free[i] as number];
    }
  }

  /** One table per group, each long enough for `numTokens` tokens. */
  tables(numGroups: number, numTokens: number, blockSize: number): number[][] {
    const n = Math.ceil(numTokens / blockSize);
    return Array.from({ length: numGroups }, () => {
      if (this.free.length < n) throw new Error('test KV memory too small');
      return this.free.splice(0, n);
    });
  }
}

export function maxAbsDiff(a: Float32Array, b: Float32Array, bOffset = 0): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs((a[i] as number) - (b[bOffset + i] as number)));
  return m;
}

export function argmax(row: Float32Array): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if ((row[i] as number) > (row[best] as number)) best = i;
  return best;
}

export function textTokens(text: string): number[] {
  return [256, ...new TextEncoder().encode(text)];
}
