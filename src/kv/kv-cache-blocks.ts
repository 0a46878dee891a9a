/** Blocks of one request or one allocation, one list per KV cache group (vLLM's KVCacheBlocks). */
import { KVError } from '../errors/index.ts';
import type { KVBlock } from './block-pool.ts';
import type { KVCacheBlocks } from './interfaces.ts';

export class KVCacheBlockList implements KVCacheBlocks {
  readonly blocks: readonly (readonly KVBlock[])[];

  constructor(blocks: readonly (readonly KVBlock[])[]) {
    this.blocks = blocks;
  }

  getBlockIds(): number[][] {
    return this.blocks.map((group) => group.map((b) => b.blockId));
  }

  getUnhashedBlockIds(): number[] {
    if (this.blocks.length !== 1) {
      throw new KVError(
        'KV_MULTIPLE_GROUPS',
        `getUnhashedBlockIds needs exactly one KV cache group, got ${this.blocks.length}`,
        {
          hint: 'Use getUnhashedBlockIdsAllGroups() for hybrid models.',
        },
      );
    }
    return this.blocks[0]!.filter((b) => b.blockHash === null).map((b) => b.blockId);
  }

  getUnhashedBlockIdsAllGroups(): number[][] {
    return this.blocks.map((group) =>
      group.filter((b) => b.blockHash === null && !b.isNull).map((b) => b.blockId),
    );
  }

  get numBlocks(): number {
    return this.blocks.reduce((n, g) => n + g.length, 0);
  }
}

export function emptyBlockList(numGroups: number): KVCacheBlockList {
  return new KVCacheBlockList(Array.from({ length: numGroups }, () => []));
}
