/**
 * Different block sizes on P and D (pull, docs/connectors/nixl.md#different-block-sizes-on-p-and-d):
 * as vLLM, D's block size must be a multiple of P's (ratio = D / P), one KV cache group
 * (no HMA), and equal tensor-parallel sizes here. Each P block is one sub-block of a D
 * block: P block at token-block position q lands in D block q / ratio at slot q % ratio
 * (pairSubBlocks, src/connector/block-lists.ts).
 */

import { KVError } from '../../errors/kv-error.ts';

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
