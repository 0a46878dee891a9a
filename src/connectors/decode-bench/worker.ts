/** DecodeBenchConnector's worker side: fills each job's blocks, in every layer of their group, with synthetic values. */
import type { KVCacheConfig, PagedKVMemory } from '../../kv/interfaces.ts';
import { BlockFiller } from './block-filler.ts';
import type { DecodeBenchConfig } from './config.ts';
import type { DecodeBenchStatsData } from './stats.ts';
import type { DecodeBenchFill } from './step-metadata.ts';

export class DecodeBenchWorker {
  readonly #kvCacheConfig: KVCacheConfig;
  readonly #filler: BlockFiller;
  #filledBlocks = 0;

  constructor(memory: PagedKVMemory, kvCacheConfig: KVCacheConfig, config: DecodeBenchConfig, seed: number) {
    this.#kvCacheConfig = kvCacheConfig;
    this.#filler = new BlockFiller(memory, config.fillMean, config.fillStd, seed);
  }

  fill(fills: readonly DecodeBenchFill[]): void {
    for (const fill of fills) {
      fill.blockIds.forEach((ids, g) => {
        for (const layer of this.#kvCacheConfig.groups[g]?.layerNames ?? []) {
          for (const id of ids) this.#filler.fill(layer, id);
        }
        this.#filledBlocks += ids.length;
      });
    }
  }

  /** Blocks filled since the last call; null when none. */
  takeStats(): DecodeBenchStatsData | null {
    if (this.#filledBlocks === 0) return null;
    const stats = { num_filled_blocks: this.#filledBlocks };
    this.#filledBlocks = 0;
    return stats;
  }
}
