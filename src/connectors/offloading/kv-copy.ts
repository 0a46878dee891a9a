/**
 * Byte copies between the paged KV memory and one chunk buffer (see ./layout.ts for the
 * chunk layout). Synchronous: after the call the source may be overwritten.
 */
import type { PagedKVMemory } from '../../kv/interfaces.ts';
import type { GroupLayout } from './layout.ts';

function tensorsOf(memory: PagedKVMemory, group: GroupLayout): number[] {
  return group.layerNames.map((l) => memory.tensorIndexOfLayer(l));
}

/** GPU blocks → chunk bytes. Positions whose block id is 0 (the null block) are left as is. */
export function copyBlocksToChunk(
  memory: PagedKVMemory,
  group: GroupLayout,
  blockIds: readonly number[],
  chunk: Uint8Array,
  blocksPerChunk: number,
): void {
  const page = group.pageSizeBytes;
  tensorsOf(memory, group).forEach((tensor, layer) => {
    for (let pos = 0; pos < blockIds.length; pos++) {
      const id = blockIds[pos] as number;
      if (id === 0) continue;
      chunk.set(memory.blockRange(tensor, id, 1), (layer * blocksPerChunk + pos) * page);
    }
  });
}

/** Chunk bytes → GPU blocks; positions whose destination is 0 are skipped. */
export function copyChunkToBlocks(
  memory: PagedKVMemory,
  group: GroupLayout,
  chunk: Uint8Array,
  blockIds: readonly number[],
  blocksPerChunk: number,
): void {
  const page = group.pageSizeBytes;
  tensorsOf(memory, group).forEach((tensor, layer) => {
    for (let pos = 0; pos < blockIds.length; pos++) {
      const id = blockIds[pos] as number;
      if (id === 0) continue;
      const start = (layer * blocksPerChunk + pos) * page;
      memory.blockRange(tensor, id, 1).set(chunk.subarray(start, start + page));
    }
  });
}
