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
}

/** Producer: a finished request's blocks, held under a lease until the consumer is done. */
export interface SendJob {
  readonly reqId: string;
  /** Clipped per group, with token positions (push pairs by position). */
  readonly blocks: PositionedBlocks[];
  readonly leaseSeconds: number;
}

/** Push, consumer → producer: where the producer may WRITE this request's blocks. */
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
