/**
 * How the local prefix hit and the connector's answer combine at admission
 * (docs/scheduler.md#how-requests-move step 2b), as pure functions so the rules are testable
 * on their own.
 */
import type { KVCacheBlock, KVCacheBlocks, KVCacheGroupSpec } from '../../kv/interfaces.ts';

export interface ExternalHitDecision {
  /** Local prefix-cache tokens kept. */
  numLocal: number;
  /** Tokens the connector provides beyond numLocal. */
  numExternal: number;
  loadAsync: boolean;
  /** True when the local partial block was dropped in favour of the external hit. */
  dropLocalTail: boolean;
}

/**
 * The partial-tail rule: the connector was asked with the block-aligned local hit. A remote
 * hit strictly longer than the local sub-block tail supersedes it (the tail is dropped and
 * loaded); otherwise the local tail is kept and nothing is loaded.
 */
export function resolveExternalHit(
  numLocal: number,
  blockSize: number,
  external: number,
  loadAsync: boolean,
): ExternalHitDecision {
  const partialTail = numLocal % blockSize;
  if (partialTail > 0 && external > partialTail) {
    return { numLocal: numLocal - partialTail, numExternal: external, loadAsync, dropLocalTail: true };
  }
  if (partialTail > 0) return { numLocal, numExternal: 0, loadAsync: false, dropLocalTail: false };
  return { numLocal, numExternal: external, loadAsync: external > 0 && loadAsync, dropLocalTail: false };
}

/** The computed blocks of a local hit cut down to `numTokens` (whole blocks per group). */
export function truncateComputedBlocks(
  blocks: KVCacheBlocks,
  numTokens: number,
  groups: readonly KVCacheGroupSpec[],
  fallbackBlockSize: number,
): KVCacheBlocks {
  const kept = blocks.blocks.map((group, g) => {
    const size = groups[g]?.spec.blockSize ?? fallbackBlockSize;
    return group.slice(0, Math.floor(numTokens / size));
  });
  return blocksView(kept);
}

function blocksView(groups: readonly (readonly KVCacheBlock[])[]): KVCacheBlocks {
  return {
    blocks: groups,
    getBlockIds: () => groups.map((g) => g.map((b) => b.blockId)),
    getUnhashedBlockIds: () => {
      if (groups.length !== 1) throw new Error('getUnhashedBlockIds needs exactly one KV cache group');
      return (groups[0] ?? []).filter((b) => b.blockHash === null).map((b) => b.blockId);
    },
    getUnhashedBlockIdsAllGroups: () =>
      groups.map((g) => g.filter((b) => b.blockHash === null && !b.isNull).map((b) => b.blockId)),
  };
}
