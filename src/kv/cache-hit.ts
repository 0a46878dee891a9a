/**
 * Longest prefix-cache hit of one attention type over its groups
 * (docs/kv-cache.md#manager-createkvcachemanageroptions). Results are one block list per
 * group id, all of the same length, a multiple of `alignment` tokens.
 */
import type { KVBlock } from './block-pool.ts';
import type { HitQuery } from './single-type-manager.ts';
import { cdiv } from './specs.ts';

/** Full attention: every block of the prefix must be cached, scanning from the left. */
export function fullAttentionHit(q: HitQuery): KVBlock[][] {
  const bs = q.spec.blockSize;
  const maxBlocks = Math.min(Math.floor(q.maxLength / bs), q.hashes.length);
  const out: KVBlock[][] = q.groupIds.map(() => []);
  for (let i = 0; i < maxBlocks; i++) {
    const hit = q.pool.getCachedBlock(q.hashes.at(i), q.groupIds, q.tokens ?? undefined, i * bs);
    if (!hit) break;
    for (let g = 0; g < hit.length; g++) out[g]!.push(hit[g]!);
  }
  const alignBlocks = q.alignment / bs;
  const keep = Math.floor(out[0]!.length / alignBlocks) * alignBlocks;
  for (const list of out) list.length = keep;
  return out;
}

/**
 * Sliding window: only the last cdiv(window - 1, blockSize) blocks before the hit end must
 * be cached; earlier positions are null blocks. Scans from the right, like vLLM, and returns
 * the longest aligned end whose window is cached.
 */
export function slidingWindowHit(q: HitQuery): KVBlock[][] {
  const bs = q.spec.blockSize;
  const need = cdiv((q.spec.slidingWindow ?? 1) - 1, bs);
  const maxBlocks = Math.min(Math.floor(q.maxLength / bs), q.hashes.length);
  const alignBlocks = q.alignment / bs;
  const nullBlock = q.pool.nullBlock;
  const out: KVBlock[][] = q.groupIds.map(() => new Array<KVBlock>(maxBlocks).fill(nullBlock));
  let runEnd = -1;
  let end = 0;
  for (let i = maxBlocks - 1; i >= 0; i--) {
    const hit = q.pool.getCachedBlock(q.hashes.at(i), q.groupIds, q.tokens ?? undefined, i * bs);
    if (!hit) {
      runEnd = -1;
      continue;
    }
    for (let g = 0; g < hit.length; g++) out[g]![i] = hit[g]!;
    if (runEnd < 0) runEnd = i + 1;
    const aligned = Math.floor(runEnd / alignBlocks) * alignBlocks;
    if (aligned - i >= need) {
      end = aligned;
      break;
    }
    if (i === 0) end = aligned; // the run reaches the first block: the whole prefix is cached
  }
  for (const list of out) list.length = end;
  return out;
}
