/** Plain data the scheduler-side connector hands its workers each step (structured-clone safe). */
import { type PositionedBlocks, pairSubBlocks, remotePositions } from '../../connector/block-lists.ts';
import type { KVCacheConfig } from '../../kv/interfaces.ts';

export interface RemoteEndpoint {
  readonly engineId: string;
  readonly host: string;
  readonly port: number;
  readonly tpSize: number;
}

/**
 * Pull, consumer: READ the remote's blocks into the local ones that hold the same tokens
 * (no local blocks = release notification only). The lists travel unpaired: the remote's
 * block size, which pairing needs, is known once the worker's handshake told it (pairLoad).
 */
export interface RecvJob {
  readonly reqId: string;
  readonly remoteRequestId: string;
  readonly remote: RemoteEndpoint;
  /** The local blocks to load, by token position. */
  readonly local: PositionedBlocks[];
  /** The remote's (clipped) lists, per group, as its answer named them. */
  readonly remoteBlockIds: number[][];
  /** The tokens the remote computed (its lists end at block cdiv(tokens, its block size)); null = unknown. */
  readonly remoteNumTokens: number | null;
  /**
   * Bidirectional, P reading D's kept blocks: D's deadline (seconds on D's scheduler clock,
   * remote_blocks_expiry_time); null or absent = no deadline known.
   */
  readonly blocksExpiryTime?: number | null;
}

/** Producer: a finished request's blocks, held under a lease until the consumer is done. */
export interface SendJob {
  readonly reqId: string;
  /** Clipped per group, with token positions (push pairs by position). */
  readonly blocks: PositionedBlocks[];
  readonly leaseSeconds: number;
}

/** The local blocks a load fills: all of them are invalid when it fails. */
export function loadTargets(job: RecvJob): number[] {
  return job.local.flatMap((g) => g.ids);
}

/**
 * A load's block pairs over all groups, by token position, once the handshake told the
 * remote's block size (`ratio`: the local one over it, ./block-ratio.ts): remote block
 * `remote[i]` fills sub-block `sub[i]` of local block `local[i]`.
 */
export function pairLoad(
  kvCacheConfig: KVCacheConfig,
  job: RecvJob,
  ratio: number,
): { local: number[]; remote: number[]; sub: number[] } {
  const remote = remotePositions(kvCacheConfig, job.remoteBlockIds, job.remoteNumTokens, ratio);
  const pairs = pairSubBlocks(job.local, remote, ratio);
  return { local: pairs.local.flat(), remote: pairs.remote.flat(), sub: pairs.sub.flat() };
}

/** Push, consumer → producer: where the producer may WRITE a request's blocks. */
export interface PushRegistration {
  readonly request_id: string;
  readonly remote_request_id: string | null;
  readonly decode_engine_id: string;
  readonly decode_host: string;
  readonly decode_port: number;
  readonly decode_tp_size: number;
  readonly blocks: PositionedBlocks[];
}

/** Push, consumer: register, then wait for the producer's writes (unless `wait` is false). */
export interface RegisterJob {
  readonly reqId: string;
  readonly remote: RemoteEndpoint;
  readonly registration: PushRegistration;
  readonly wait: boolean;
}

export interface HeartbeatJob {
  readonly remote: RemoteEndpoint;
  readonly remoteRequestIds: string[];
}

export interface NixlStepMetadata {
  [key: string]: unknown;
  readonly reqsToRecv: RecvJob[];
  readonly reqsToSend: SendJob[];
  readonly reqsToRegister: RegisterJob[];
  readonly reqsNotProcessed: string[];
  readonly heartbeats: HeartbeatJob[];
}

/** vLLM's get_base_request_id: strips the "-<8 hex>" suffix the API server appends. */
export function baseRequestId(id: string): string {
  return id.replace(/-[0-9a-f]{8}$/i, '');
}
