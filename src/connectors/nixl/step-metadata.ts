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

export const HEARTBEAT_PREFIX = 'HB:';
export const PUSH_REGISTRATION_PREFIX = 'PUSH_REG:';
export const PUSH_NACK_PREFIX = 'PUSH_NACK:';

/** Longest notification the transfer agent accepts (its string field limit). */
const MAX_NOTIFICATION_CHARS = 4096;

/**
 * Heartbeat notifications for `ids`, as few as fit: one message per ~4 KiB of ids, since a
 * decode engine with a few hundred waiting requests lists more than one message can carry.
 */
export function heartbeatMessages(ids: readonly string[]): string[] {
  const out: string[] = [];
  let current = HEARTBEAT_PREFIX;
  for (const id of ids) {
    const piece = current === HEARTBEAT_PREFIX ? id : `,${id}`;
    if (current.length + piece.length > MAX_NOTIFICATION_CHARS && current !== HEARTBEAT_PREFIX) {
      out.push(current);
      current = HEARTBEAT_PREFIX + id;
    } else {
      current += piece;
    }
  }
  if (current !== HEARTBEAT_PREFIX) out.push(current);
  return out;
}

/** "{request id}:{world size}" (ids may contain ':'; the count is after the last one). */
export function parseCompletion(message: string): { reqId: string; count: number } | null {
  const i = message.lastIndexOf(':');
  if (i <= 0) return null;
  const count = Number(message.slice(i + 1));
  return Number.isInteger(count) && count > 0 ? { reqId: message.slice(0, i), count } : null;
}

/** vLLM's get_base_request_id: strips the "-<8 hex>" suffix the API server appends. */
export function baseRequestId(id: string): string {
  return id.replace(/-[0-9a-f]{8}$/i, '');
}
