/**
 * Block-list geometry shared by the P/D connectors (NIXL pull and push, MoRIIO): which of a
 * request's blocks a peer needs (sliding-window groups clipped to the window, see
 * docs/connector-api.md#plain-data-between-the-roles-srcconnectortypests) and how local
 * blocks pair with remote ones. Pairing is by token position, never by list index, so a
 * prefix-cache hit on the consumer, or a consumer holding more blocks than the producer,
 * cannot misalign them (list-index pairing did in vLLM).
 */
import type { KVCacheBlocks, KVCacheConfig } from '../kv/interfaces.ts';

const cdiv = (a: number, b: number): number => Math.ceil(a / b);

/** Keeps the last cdiv(window, block_size) + 1 blocks of sliding-window groups. */
export function clipToWindows(
  kvCacheConfig: KVCacheConfig,
  blockIds: readonly (readonly number[])[],
): number[][] {
  return blockIds.map((ids, g) => {
    const spec = kvCacheConfig.groups[g]?.spec;
    if (spec?.kind !== 'sliding_window' || spec.slidingWindow === null) return [...ids];
    const keep = cdiv(spec.slidingWindow, spec.blockSize) + 1;
    return ids.length > keep ? ids.slice(ids.length - keep) : [...ids];
  });
}

/** Blocks of one group with the token-block position of each. */
export interface PositionedBlocks {
  readonly positions: number[];
  readonly ids: number[];
}

/**
 * A producer's (clipped) list ends at block cdiv(numTokens, block_size): derive positions.
 * `ratio`: the local block size over the producer's (its blocks are that many times smaller).
 */
export function remotePositions(
  kvCacheConfig: KVCacheConfig,
  remoteBlockIds: readonly (readonly number[])[],
  remoteNumTokens: number | null,
  ratio = 1,
): PositionedBlocks[] {
  return remoteBlockIds.map((ids, g) => {
    const blockSize = (kvCacheConfig.groups[g]?.spec.blockSize ?? 16) / ratio;
    const total =
      remoteNumTokens !== null && remoteNumTokens > 0 ? cdiv(remoteNumTokens, blockSize) : ids.length;
    const first = Math.max(0, total - ids.length);
    return { positions: ids.map((_, i) => first + i), ids: [...ids] };
  });
}

/** The consumer's blocks that must be loaded: allocated, not a prefix-cache hit, not null. */
export function blocksToLoad(kvCacheConfig: KVCacheConfig, blocks: KVCacheBlocks): PositionedBlocks[] {
  return kvCacheConfig.groups.map((_, g) => {
    const out: PositionedBlocks = { positions: [], ids: [] };
    (blocks.blocks[g] ?? []).forEach((b, pos) => {
      if (b.isNull || b.blockHash !== null) return;
      out.positions.push(pos);
      out.ids.push(b.blockId);
    });
    return out;
  });
}

/** Local blocks paired with remote ones, per group; `sub`: the sub-block of the local block each remote block fills. */
export interface SubBlockPairs {
  readonly local: number[][];
  readonly remote: number[][];
  readonly sub: number[][];
}

/**
 * Pairs local and remote blocks by token position, per group, when the remote's blocks are
 * `ratio` times smaller (positions in remote-size blocks): remote block q lands in the local
 * block at position floor(q / ratio), as its sub-block q % ratio.
 */
export function pairSubBlocks(
  local: readonly PositionedBlocks[],
  remote: readonly PositionedBlocks[],
  ratio: number,
): SubBlockPairs {
  const out: SubBlockPairs = { local: [], remote: [], sub: [] };
  local.forEach((l, g) => {
    const r = remote[g];
    const byPos = new Map<number, number>();
    if (r) for (let i = 0; i < r.positions.length; i++) byPos.set(r.positions[i]!, r.ids[i]!);
    const li: number[] = [];
    const ri: number[] = [];
    const si: number[] = [];
    l.positions.forEach((p, i) => {
      for (let sub = 0; sub < ratio; sub++) {
        const rid = byPos.get(p * ratio + sub);
        if (rid === undefined || rid === 0) continue;
        li.push(l.ids[i]!);
        ri.push(rid);
        si.push(sub);
      }
    });
    out.local.push(li);
    out.remote.push(ri);
    out.sub.push(si);
  });
  return out;
}

/** Pairs local and remote blocks that hold the same token positions, per group. */
export function pairByPosition(
  local: readonly PositionedBlocks[],
  remote: readonly PositionedBlocks[],
): { local: number[][]; remote: number[][] } {
  const pairs = pairSubBlocks(local, remote, 1);
  return { local: pairs.local, remote: pairs.remote };
}

export function countBlocks(lists: readonly (readonly number[])[]): number {
  return lists.reduce((s, l) => s + l.length, 0);
}
