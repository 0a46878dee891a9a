/**
 * Where each of a rank's KV heads comes from when producer and consumer differ in tensor
 * parallel size (docs/connectors/nixl.md#different-tensor-parallel-sizes-on-p-and-d-pull),
 * and the handshake check of the remote block geometry. kvconnect's KV layout is NHD-like
 * ([2][blockSize][heads][headSize] per block), so a head slice is strided: the consumer reads
 * whole remote blocks into a staging region and rearranges heads locally (./head-scatter.ts)
 * instead of requiring an HND producer.
 */

import { KVError } from '../../errors/kv-error.ts';
import { blockSizeRatio } from './block-ratio.ts';
import { handshakeTargetRanks } from './tp-mapping.ts';

/** The global KV heads one rank holds: contiguous, replicated (one head) when tp > heads. */
export interface RankHeads {
  readonly start: number;
  readonly count: number;
}

export function rankKvHeads(tpRank: number, tpSize: number, totalKvHeads: number): RankHeads {
  if (tpSize <= totalKvHeads) {
    const count = totalKvHeads / tpSize;
    return { start: tpRank * count, count };
  }
  return { start: Math.floor((tpRank * totalKvHeads) / tpSize), count: 1 };
}

/** For local head j: the remote rank to read it from and its index among that rank's heads. */
export interface HeadSource {
  readonly rank: number;
  readonly remoteIndex: number;
}

export interface HeadPlan {
  readonly localHeads: RankHeads;
  /** Heads held by one remote rank. */
  readonly remoteHeadsPerRank: number;
  /** One entry per local head, in local order. */
  readonly heads: readonly HeadSource[];
  /** Remote ranks actually read (GQA dedup: the first rank holding each needed head). */
  readonly readRanks: readonly number[];
  /** Every remote rank mapped to this one; those not read get a bare notification. */
  readonly notifyRanks: readonly number[];
}

export function planHeads(opts: {
  localTp: number;
  tpRank: number;
  remoteTp: number;
  totalKvHeads: number;
}): HeadPlan {
  const { localTp, tpRank, remoteTp, totalKvHeads } = opts;
  const targets = handshakeTargetRanks(localTp, tpRank, remoteTp);
  const localHeads = rankKvHeads(tpRank, localTp, totalKvHeads);
  const holders = targets.map((rank) => ({ rank, heads: rankKvHeads(rank, remoteTp, totalKvHeads) }));
  const heads: HeadSource[] = [];
  for (let j = 0; j < localHeads.count; j++) {
    const g = localHeads.start + j;
    const holder = holders.find((h) => g >= h.heads.start && g < h.heads.start + h.heads.count);
    if (!holder) {
      throw new KVError(
        'NIXL_TP_HEADS_UNMAPPED',
        `KV head ${g} of rank ${tpRank} (tp ${localTp}) is held by none of remote ranks [${targets.join(', ')}] (tp ${remoteTp})`,
        { hint: 'Both engines must serve the same model (same number of KV heads).' },
      );
    }
    heads.push({ rank: holder.rank, remoteIndex: g - holder.heads.start });
  }
  const readRanks = [...new Set(heads.map((h) => h.rank))];
  return {
    localHeads,
    remoteHeadsPerRank: rankKvHeads(0, remoteTp, totalKvHeads).count,
    heads,
    readRanks,
    notifyRanks: targets,
  };
}

/** What the handshake compares (both sides' published geometry plus the model's KV heads). */
export interface GeometryCheck {
  readonly engineId: string;
  readonly mode: 'pull' | 'push';
  readonly totalKvHeads: number;
  /** This engine runs several KV cache groups or sliding-window layers (HMA). */
  readonly hybrid?: boolean;
  readonly local: {
    readonly tpSize: number;
    readonly blockSize: number;
    readonly blockLens: readonly number[];
  };
  readonly remote: {
    readonly tpSize: number;
    readonly blockSize: number;
    readonly blockLens: readonly number[];
  };
}

/**
 * Throws unless the remote blocks can feed this rank: a block size this engine can remap
 * (./block-ratio.ts), the same tensor count, divisible TP sizes (vLLM's messages), and
 * per-tensor block lengths that scale with the heads each rank holds and the block sizes.
 * Push (WRITE) moves whole blocks, so it needs equal TP and block sizes. Returns the
 * block-size ratio (local / remote).
 */
export function validateRemoteGeometry(c: GeometryCheck): number {
  const { local, remote } = c;
  const describe = `Remote engine ${c.engineId} has KV blocks of [${remote.blockLens.join(', ')}] bytes (block size ${remote.blockSize}, tp ${remote.tpSize}), this engine [${local.blockLens.join(', ')}] (block size ${local.blockSize}, tp ${local.tpSize})`;
  if (local.tpSize !== remote.tpSize) {
    handshakeTargetRanks(local.tpSize, 0, remote.tpSize); // vLLM's divisibility messages
    if (c.mode === 'push') {
      throw new KVError(
        'NIXL_HETERO_TP_PUSH_UNSUPPORTED',
        `NixlPushConnector needs the same tensor_parallel_size on both engines: remote engine ${c.engineId} has ${remote.tpSize}, this engine ${local.tpSize}`,
        { hint: 'Use NixlConnector (pull), which supports different TP sizes, or equal TP sizes.' },
      );
    }
  }
  const ratio = blockSizeRatio({
    engineId: c.engineId,
    mode: c.mode,
    hybrid: c.hybrid ?? false,
    localBlockSize: local.blockSize,
    remoteBlockSize: remote.blockSize,
    localTp: local.tpSize,
    remoteTp: remote.tpSize,
  });
  const localHeads = rankKvHeads(0, local.tpSize, c.totalKvHeads).count;
  const remoteHeads = rankKvHeads(0, remote.tpSize, c.totalKvHeads).count;
  const ok =
    remote.blockLens.length === local.blockLens.length &&
    remote.blockLens.every((len, i) => len * localHeads * ratio === (local.blockLens[i] ?? -1) * remoteHeads);
  if (!ok) {
    throw new KVError('NIXL_GEOMETRY_MISMATCH', describe, {
      hint: 'Use the same model, block size and cache dtype on both engines (tensor-parallel sizes may differ if one divides the other).',
    });
  }
  return ratio;
}
