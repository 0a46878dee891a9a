/** Descriptor validation and coalescing of block lists into contiguous runs. */
import { KVError } from '../errors/index.ts';
import { MAX_DESCRIPTORS } from './messages.ts';
import type { AgentMetadata, BlockListPair, DescPair, RegionGeometry } from './types.ts';

/** Pairs local and remote block ids element by element and merges runs contiguous on both sides. */
export function coalesceBlockLists(pairs: readonly BlockListPair[]): DescPair[] {
  const out: DescPair[] = [];
  for (const p of pairs) {
    if (p.localBlockIds.length !== p.remoteBlockIds.length) {
      throw new KVError(
        'TRANSFER_DESC_LENGTH_MISMATCH',
        `local and remote block lists differ in length (${p.localBlockIds.length} vs ${p.remoteBlockIds.length})`,
        { hint: 'Pair every local block with exactly one remote block (trim the longer list first).' },
      );
    }
    let run: { localFirst: number; remoteFirst: number; count: number } | null = null;
    for (let i = 0; i < p.localBlockIds.length; i++) {
      const l = p.localBlockIds[i]!;
      const r = p.remoteBlockIds[i]!;
      if (run && l === run.localFirst + run.count && r === run.remoteFirst + run.count) {
        run.count++;
        continue;
      }
      if (run) out.push({ localRegion: p.localRegion, remoteRegion: p.remoteRegion, ...run });
      run = { localFirst: l, remoteFirst: r, count: 1 };
    }
    if (run) out.push({ localRegion: p.localRegion, remoteRegion: p.remoteRegion, ...run });
  }
  return out;
}

function isBlockIndex(n: unknown): n is number {
  return typeof n === 'number' && Number.isInteger(n) && n >= 0;
}

/** Throws TRANSFER_OUT_OF_BOUNDS unless [first, first+count) lies inside the region. */
export function checkRun(
  regions: ReadonlyMap<number, RegionGeometry>,
  region: number,
  first: number,
  count: number,
  side: 'local' | 'remote',
): RegionGeometry {
  const g = regions.get(region);
  if (!g) {
    throw new KVError('TRANSFER_OUT_OF_BOUNDS', `${side} region ${region} is not registered`, {
      hint: 'Register the region with registerMemory() before posting transfers that use it.',
      details: { region, side },
    });
  }
  if (!isBlockIndex(first) || !isBlockIndex(count) || count === 0 || first + count > g.numBlocks) {
    throw new KVError(
      'TRANSFER_OUT_OF_BOUNDS',
      `${side} blocks [${first}, ${first}+${count}) are outside region ${region} (${g.numBlocks} blocks)`,
      {
        hint: 'Block ids must be in [0, numBlocks) of the registered region; check the block ids sent by the peer.',
        details: { region, first, count, numBlocks: g.numBlocks, side },
      },
    );
  }
  return g;
}

/** Validates both sides of every pair and that paired regions have equal block sizes. */
export function validateDescPairs(
  descs: readonly DescPair[],
  local: ReadonlyMap<number, RegionGeometry>,
  remote: ReadonlyMap<number, RegionGeometry>,
): void {
  for (const d of descs) {
    const l = checkRun(local, d.localRegion, d.localFirst, d.count, 'local');
    const r = checkRun(remote, d.remoteRegion, d.remoteFirst, d.count, 'remote');
    if (l.blockBytes !== r.blockBytes) {
      throw new KVError(
        'TRANSFER_BLOCK_SIZE_MISMATCH',
        `local region ${d.localRegion} has ${l.blockBytes}-byte blocks but remote region ${d.remoteRegion} has ${r.blockBytes}`,
        { hint: 'Both engines must use the same model, dtype, block size and KV layout.' },
      );
    }
  }
}

function isBlockLists(x: readonly DescPair[] | readonly BlockListPair[]): x is readonly BlockListPair[] {
  return x.length > 0 && 'localBlockIds' in (x[0] as object);
}

const geometries = new WeakMap<AgentMetadata, ReadonlyMap<number, RegionGeometry>>();

/** A peer's regions by id, built once per metadata object (a post is on the latency path). */
function geometryOf(remote: AgentMetadata): ReadonlyMap<number, RegionGeometry> {
  let g = geometries.get(remote);
  if (!g) {
    g = new Map(remote.regions.map((r) => [r.id, r]));
    geometries.set(remote, g);
  }
  return g;
}

/**
 * What every agent does before posting a READ or WRITE: coalesce block lists into runs,
 * bound the descriptor count, and bounds-check both sides against the registered regions.
 */
export function prepareDescriptors(
  kind: 'READ' | 'WRITE',
  input: readonly DescPair[] | readonly BlockListPair[],
  local: ReadonlyMap<number, RegionGeometry>,
  remote: AgentMetadata,
): DescPair[] {
  const descs = isBlockLists(input) ? coalesceBlockLists(input) : [...input];
  if (descs.length === 0 || descs.length > MAX_DESCRIPTORS) {
    throw new KVError('TRANSFER_BAD_DESCRIPTOR_COUNT', `${kind} with ${descs.length} descriptors`, {
      hint: `Pass between 1 and ${MAX_DESCRIPTORS} descriptors (contiguous block runs) per transfer.`,
    });
  }
  validateDescPairs(descs, local, geometryOf(remote));
  return descs;
}
