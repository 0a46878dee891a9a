/**
 * Heterogeneous tensor parallelism
 * (docs/connectors/nixl.md#different-tensor-parallel-sizes-on-p-and-d-pull) as pure
 * functions: which remote ranks a local rank handshakes with, which head slice it takes, and
 * how many completion notifications a producer rank waits for. The pull path plans its reads
 * with ./head-plan.ts, which takes the ranks from handshakeTargetRanks; producer-leases.ts
 * counts notifications with consumersPerProducer. computeTpMapping is vLLM's mapping, which
 * the tests check head-plan.ts against. MoRIIO has rules of its own (../moriio/tp.ts).
 */
import { KVError } from '../../errors/kv-error.ts';

/** Positive: local_tp / remote_tp (local ≥ remote); negative: -(remote_tp / local_tp). */
export function tpRatio(localTp: number, remoteTp: number): number {
  if (localTp >= remoteTp) {
    if (localTp % remoteTp !== 0) {
      throw notDivisible(
        `Local tensor parallel size ${localTp} is not divisible by remote tensor parallel size ${remoteTp}.`,
      );
    }
    return localTp / remoteTp;
  }
  if (remoteTp % localTp !== 0) {
    throw notDivisible(
      `Remote tensor parallel size ${remoteTp} is not divisible by local tensor parallel size ${localTp}.`,
    );
  }
  return -(remoteTp / localTp);
}

function notDivisible(message: string): KVError {
  return new KVError('NIXL_TP_NOT_DIVISIBLE', message, {
    hint: 'Use tensor-parallel sizes where one divides the other (e.g. 1↔2, 2↔4).',
  });
}

/** Remote ranks a local rank handshakes with. */
export function handshakeTargetRanks(localTp: number, tpRank: number, remoteTp: number): number[] {
  const ratio = tpRatio(localTp, remoteTp);
  if (ratio > 0) return [Math.floor(tpRank / ratio)];
  const k = -ratio;
  return Array.from({ length: k }, (_, i) => tpRank * k + i);
}

export interface TpMapping {
  /** Remote ranks whose attention KV this rank reads (GQA-deduplicated by KV head). */
  readonly sourceRanks: readonly number[];
  /** Which slice of the remote block's heads this rank takes (D TP > P TP), else 0. */
  readonly rankOffsetFactor: number;
  /** Heads of one local rank / heads of one remote rank (≤ 1 when reading a slice). */
  readonly headFraction: number;
}

export function computeTpMapping(opts: {
  localTp: number;
  tpRank: number;
  remoteTp: number;
  totalKvHeads: number;
  isMla?: boolean;
}): TpMapping {
  const { localTp, tpRank, remoteTp, totalKvHeads } = opts;
  const ratio = tpRatio(localTp, remoteTp);
  const localHeads = Math.max(1, Math.floor(totalKvHeads / localTp));
  const remoteHeads = Math.max(1, Math.floor(totalKvHeads / remoteTp));
  if (opts.isMla || ratio > 0) {
    const source = Math.floor((tpRank * remoteTp) / localTp);
    let offset = 0;
    if (!opts.isMla && localTp > remoteTp) {
      if (localTp > totalKvHeads) {
        const localHead = Math.floor((tpRank * totalKvHeads) / localTp);
        const pStartHead = Math.floor((source * totalKvHeads) / remoteTp);
        offset = localHead - pStartHead;
      } else {
        offset = tpRank % (localTp / remoteTp);
      }
    }
    return {
      sourceRanks: [source],
      rankOffsetFactor: offset,
      headFraction: opts.isMla ? 1 : localHeads / remoteHeads,
    };
  }
  const k = -ratio;
  const seen = new Set<number>();
  const sources: number[] = [];
  for (let r = tpRank * k; r < tpRank * k + k; r++) {
    const head = Math.floor((r * totalKvHeads) / remoteTp);
    if (seen.has(head)) continue;
    seen.add(head);
    sources.push(r);
  }
  return { sourceRanks: sources, rankOffsetFactor: 0, headFraction: localHeads / remoteHeads };
}

/** Notifications a producer rank waits for before freeing (one per consumer rank reading it). */
export function consumersPerProducer(producerTp: number, consumerTp: number): number {
  return consumerTp > producerTp ? -tpRatio(producerTp, consumerTp) : 1;
}
