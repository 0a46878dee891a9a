/** Plain data the scheduler-side connector hands its workers each step (structured-clone safe). */
import type { PositionedBlocks } from '../../connector/block-lists.ts';

export interface RemoteEndpoint {
  readonly engineId: string;
  readonly host: string;
  readonly port: number;
  readonly tpSize: number;
}

/** Pull, consumer: READ `remote` blocks into `local` (empty lists = release notification only). */
export interface RecvJob {
  readonly reqId: string;
  readonly remoteRequestId: string;
  readonly remote: RemoteEndpoint;
  readonly localBlockIds: number[][];
  readonly remoteBlockIds: number[][];
  /**
   * Bidirectional, P reading D's kept blocks: D's deadline (seconds on D's scheduler clock,
   * remote_blocks_expiry_time); null or absent = no deadline known.
   */
  readonly blocksExpiryTime?: number | null;
  /**
   * The lists before pairing (local blocks to load by position, the remote's lists and
   * token count): a remote with smaller blocks is paired by the worker once the handshake
   * told it the remote's block size (./block-ratio.ts).
   */
  readonly unpaired?: {
    readonly local: PositionedBlocks[];
    readonly remote: number[][];
    readonly remoteNumTokens: number | null;
  };
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
  return job.unpaired ? job.unpaired.local.flatMap((g) => g.ids) : job.localBlockIds.flat();
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
