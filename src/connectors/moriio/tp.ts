/**
 * Heterogeneous tensor parallelism for MoRIIO
 * (docs/connectors/moriio.md#heterogeneous-tensor-parallelism): which peer ranks a rank talks
 * to, the replicated-heads rule, and how many ACKs a producer rank waits for. Blocks move
 * whole, so only layouts where every rank holds every KV head (replicated) can differ in TP.
 */
import { KVError } from '../../errors/kv-error.ts';

/** vLLM's get_moriio_remote_tp_rank: the first peer rank a local rank maps to. */
export function moriioRemoteTpRank(localRank: number, localTp: number, remoteTp: number): number {
  if (localTp === remoteTp) return localRank;
  if (remoteTp > localTp) {
    if (remoteTp % localTp !== 0) throw notMultiple(remoteTp, localTp);
    return localRank * (remoteTp / localTp);
  }
  if (localTp % remoteTp !== 0) throw notMultiple(localTp, remoteTp);
  return Math.floor(localRank / (localTp / remoteTp));
}

/** Every peer rank that shares this rank's KV (one when remote ≤ local, else remote/local). */
export function moriioPeerRanks(localRank: number, localTp: number, remoteTp: number): number[] {
  const first = moriioRemoteTpRank(localRank, localTp, remoteTp);
  const k = remoteTp > localTp ? remoteTp / localTp : 1;
  return Array.from({ length: k }, (_, i) => first + i);
}

function notMultiple(big: number, small: number): KVError {
  return new KVError(
    'MORIIO_TP_NOT_MULTIPLE',
    `remote tp_size ${big} must be a multiple of local tp_size ${small} for heterogeneous-TP P/D`,
    { hint: 'Use tensor-parallel sizes where one divides the other (e.g. 1↔2, 2↔4).' },
  );
}

/** Different TP sizes need KV heads replicated on both sides: min(tp) ≥ total KV heads. */
export function validateMoRIIOHeterogeneousTp(totalKvHeads: number, localTp: number, remoteTp: number): void {
  if (localTp === remoteTp || Math.min(localTp, remoteTp) >= totalKvHeads) return;
  throw new KVError(
    'MORIIO_HETERO_TP_UNSUPPORTED',
    `MoRIIO heterogeneous TP requires replicated KV heads on both prefill and decode. Got total_num_kv_heads=${totalKvHeads}, local_tp_size=${localTp}, remote_tp_size=${remoteTp}.`,
    {
      hint: `Use the same tensor_parallel_size on prefill and decode, or a model with at most ${Math.min(localTp, remoteTp)} KV head(s) so every rank holds all of them.`,
      details: { totalKvHeads, localTp, remoteTp },
    },
  );
}

/** vLLM's get_moriio_expected_ack_count: ACKs per transfer id a producer rank waits for. */
export function moriioExpectedAckCount(producerTp: number, consumerTp: number): number {
  return consumerTp <= producerTp ? 1 : consumerTp / producerTp;
}

/** write_done notifications a consumer rank waits for (every producer rank mapped to it writes). */
export function moriioExpectedWriteDoneCount(producerTp: number, consumerTp: number): number {
  return producerTp > consumerTp ? producerTp / consumerTp : 1;
}
