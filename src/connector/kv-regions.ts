/**
 * A worker's KV tensors as the memory regions a transfer agent registers (the P/D connectors
 * register them once, in registerKvCaches): region id = tensor index, block i of a region =
 * block i of the tensor.
 */
import type { PagedKVMemory } from '../kv/interfaces.ts';

export function kvRegions(
  memory: PagedKVMemory,
): { id: number; bytes: Uint8Array; blockBytes: number; numBlocks: number }[] {
  return memory.tensors.map((t) => ({
    id: t.index,
    bytes: t.bytes,
    blockBytes: t.blockBytes,
    numBlocks: t.numBlocks,
  }));
}
