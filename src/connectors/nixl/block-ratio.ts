/**
 * Different block sizes on P and D (pull, docs/connectors/nixl.md#different-block-sizes-on-p-and-d):
 * as vLLM, D's block size must be a multiple of P's (ratio = D / P), one KV cache group
 * (no HMA), and equal tensor-parallel sizes here. Each P block is one sub-block of a D
 * block: P block at token-block position q lands in D block q / ratio at slot q % ratio.
 */

import type { PositionedBlocks } from '../../connector/block-lists.ts';
import { KVError } from '../../errors/kv-error.ts';

/** One remote (P) block and where it lands: D block `localId`, sub-block `sub`. */
export interface SubBlockPairs {
  readonly local: number[];
  readonly sub: number[];
  readonly remote: number[];
}

/** The remote blocks' token-block positions in remote-size blocks (the list ends at cdiv(tokens, size)). */
function remotePositionsOf(ids: readonly number[], blockSize: number, numTokens: number | null): number[] {
  const total = numTokens !== null && numTokens > 0 ? Math.ceil(numTokens / blockSize) : ids.length;
  const first = Math.max(0, total - ids.length);
  return ids.map((_, i) => first + i);
}

/** Pairs every remote block that falls in one of D's blocks to load (one KV cache group). */
export function pairSubBlocks(
  local: PositionedBlocks,
  remoteIds: readonly number[],
  remote: { blockSize: number; numTokens: number | null },
  ratio: number,
): SubBlockPairs {
  const localAt = new Map(local.positions.map((p, i) => [p, local.ids[i]!] as const));
  const out: SubBlockPairs = { local: [], sub: [], remote: [] };
  remotePositionsOf(remoteIds, remote.blockSize, remote.numTokens).forEach((q, i) => {
    const localId = localAt.get(Math.floor(q / ratio));
    const rid = remoteIds[i]!;
    if (localId === undefined || rid === 0) return;
    out.local.push(localId);
    out.sub.push(q % ratio);
    out.remote.push(rid);
  });
  return out;
}

/**
 * Copies a staged remote block (layout [K,V][remote block size][row]) into sub-block `sub`
 * of a local block ([K,V][local block size][row]): two contiguous runs, K then V.
 */
export function copySubBlock(
  src: Uint8Array,
  srcOffset: number,
  dst: Uint8Array,
  dstOffset: number,
  localBlockBytes: number,
  ratio: number,
  sub: number,
): void {
  const half = localBlockBytes / 2 / ratio;
  for (const kv of [0, 1]) {
    const from = srcOffset + kv * half;
    dst.set(src.subarray(from, from + half), dstOffset + kv * (localBlockBytes / 2) + sub * half);
  }
}

export interface BlockSizeCheck {
  readonly engineId: string;
  readonly mode: 'pull' | 'push';
  /** This engine (D) runs several KV cache groups or sliding-window layers (HMA). */
  readonly hybrid: boolean;
  readonly localBlockSize: number;
  readonly remoteBlockSize: number;
  readonly localTp: number;
  readonly remoteTp: number;
}

function refuse(c: BlockSizeCheck, message: string, expected: string, fix: string): KVError {
  return new KVError('NIXL_BLOCK_SIZE_MISMATCH', message, {
    field: 'block_size',
    hint: `--block-size: expected ${expected}, received ${c.remoteBlockSize} on the prefill engine ${c.engineId} and ${c.localBlockSize} here. ${fix}`,
    details: { expected, remote: c.remoteBlockSize, local: c.localBlockSize },
  });
}

/** D / P, the ratio a load remaps with (1 = same size); throws for what vLLM or kvconnect refuses. */
export function blockSizeRatio(c: BlockSizeCheck): number {
  if (c.remoteBlockSize === c.localBlockSize) return 1;
  const same = 'Start both engines with the same --block-size';
  if (c.remoteBlockSize > c.localBlockSize || c.localBlockSize % c.remoteBlockSize !== 0) {
    throw refuse(
      c,
      `Only nP < nD supported currently: the decode engine's block size must be a multiple of the prefill engine's (prefill ${c.remoteBlockSize}, decode ${c.localBlockSize})`,
      `a divisor of ${c.localBlockSize}`,
      `${same}, or a prefill block size that divides the decode one.`,
    );
  }
  if (c.mode === 'push') {
    throw refuse(
      c,
      'NixlPushConnector needs the same block size on both engines',
      `${c.localBlockSize}`,
      `${same}, or use NixlConnector (pull), which remaps smaller prefill blocks.`,
    );
  }
  if (c.hybrid) {
    throw refuse(
      c,
      'HMA does not support different remote block size yet',
      `${c.localBlockSize}`,
      `${same}.`,
    );
  }
  if (c.localTp < c.remoteTp) {
    throw refuse(
      c,
      'Different local/remote block sizes are not supported when P TP > D TP.',
      `${c.localBlockSize}`,
      `${same}, or the same tensor_parallel_size.`,
    );
  }
  if (c.localTp !== c.remoteTp) {
    throw refuse(
      c,
      'kvconnect remaps different block sizes only between engines of the same tensor_parallel_size',
      `${c.localBlockSize}`,
      `${same}, or the same tensor_parallel_size.`,
    );
  }
  return c.localBlockSize / c.remoteBlockSize;
}
