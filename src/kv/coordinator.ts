/**
 * One interface over all KV cache groups (vLLM's unitary and hybrid coordinators): forwards
 * allocation to each group's manager and finds the prefix hit every group agrees on, a
 * fixed point over attention types aligned to the LCM of the group block sizes.
 */
import type { BlockPool, KVBlock } from './block-pool.ts';
import { fullAttentionHit, slidingWindowHit } from './cache-hit.ts';
import type { CacheRequest, KVCacheConfig, KVCacheSpec } from './interfaces.ts';
import { hashView, SingleTypeManager } from './single-type-manager.ts';
import { lcm, specKey } from './specs.ts';

interface AttentionType {
  spec: KVCacheSpec;
  groupIds: number[];
}

export class KVCacheCoordinator {
  readonly managers: readonly SingleTypeManager[];
  readonly schedulerBlockSize: number;
  readonly hashBlockSize: number;
  readonly #pool: BlockPool;
  readonly #types: AttentionType[];
  readonly #verifyTokens: boolean;

  constructor(config: KVCacheConfig, pool: BlockPool, hashBlockSize: number, verifyTokens: boolean) {
    this.#pool = pool;
    this.hashBlockSize = hashBlockSize;
    this.#verifyTokens = verifyTokens;
    this.managers = config.groups.map((g, i) => new SingleTypeManager(g.spec, i, pool, hashBlockSize));
    this.schedulerBlockSize = lcm(config.groups.map((g) => g.spec.blockSize));
    const byKey = new Map<string, AttentionType>();
    config.groups.forEach((g, i) => {
      const key = specKey(g.spec);
      const t = byKey.get(key) ?? { spec: g.spec, groupIds: [] };
      t.groupIds.push(i);
      byKey.set(key, t);
    });
    // Full attention first: its hit is a cheap left scan that bounds the others.
    this.#types = [...byKey.values()].sort((a, b) => rank(a.spec) - rank(b.spec));
  }

  findLongestCacheHit(req: CacheRequest, maxLength: number): { blocks: KVBlock[][]; numTokens: number } {
    const numGroups = this.managers.length;
    const blocks: KVBlock[][] = Array.from({ length: numGroups }, () => []);
    let hitLength = maxLength;
    const alignment = this.#types.length === 1 ? this.#types[0]!.spec.blockSize : this.schedulerBlockSize;
    for (;;) {
      let changed = false;
      for (const t of this.#types) {
        const found = this.#hitOf(t, req, hitLength, alignment);
        const length = found[0]!.length * t.spec.blockSize;
        t.groupIds.forEach((g, j) => {
          blocks[g] = found[j]!;
        });
        if (length < hitLength) {
          hitLength = length;
          changed = true;
        }
      }
      if (!changed || hitLength === 0) break;
    }
    if (hitLength === 0) for (let g = 0; g < numGroups; g++) blocks[g] = [];
    return { blocks, numTokens: hitLength };
  }

  #hitOf(t: AttentionType, req: CacheRequest, maxLength: number, alignment: number): KVBlock[][] {
    const query = {
      hashes: hashView(req.blockHashes, t.spec.blockSize / this.hashBlockSize),
      maxLength,
      groupIds: t.groupIds,
      pool: this.#pool,
      spec: t.spec,
      alignment,
      tokens: this.#verifyTokens ? req.allTokenIds : null,
    };
    return t.spec.kind === 'sliding_window' ? slidingWindowHit(query) : fullAttentionHit(query);
  }
}

function rank(spec: KVCacheSpec): number {
  return spec.kind === 'full_attention' ? 0 : 1;
}
