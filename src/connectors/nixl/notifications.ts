/**
 * The NIXL connectors' notifications (docs/connectors/nixl.md#notifications): every message a
 * worker sends a peer's transfer agent is built here, and every message it receives is read
 * and handed to the part that handles it here, so each format has one writer and one reader.
 *
 * - completion `{request id}:{world size}`: a consumer rank is done with a request's blocks
 *   (read them, or gave up); the producer frees them after one per consumer rank. In push
 *   mode the producer sends it to the consumer once its WRITEs landed.
 * - heartbeat `HB:{id},{id},...`: the consumer still wants these requests' blocks (lease renewal).
 * - push registration `PUSH_REG:{json}`: where the producer may WRITE a request's blocks.
 * - push nack `PUSH_NACK:{request id}:{block},{block},...`: the producer could not push them.
 */
import type { Notification } from '../../transfer/index.ts';
import type { PushRegistration } from './step-metadata.ts';

export const HEARTBEAT_PREFIX = 'HB:';
const PUSH_REGISTRATION_PREFIX = 'PUSH_REG:';
const PUSH_NACK_PREFIX = 'PUSH_NACK:';

/** Longest notification the transfer agent accepts (its string field limit). */
const MAX_NOTIFICATION_CHARS = 4096;

/** One consumer rank is done with `reqId` (of a consumer with `worldSize` ranks). */
export function completionNotification(reqId: string, worldSize: number): string {
  return `${reqId}:${worldSize}`;
}

/** "{request id}:{world size}" (ids may contain ':'; the count is after the last one). */
export function parseCompletion(message: string): { reqId: string; count: number } | null {
  const i = message.lastIndexOf(':');
  if (i <= 0) return null;
  const count = Number(message.slice(i + 1));
  return Number.isInteger(count) && count > 0 ? { reqId: message.slice(0, i), count } : null;
}

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

export function pushRegistrationNotification(registration: PushRegistration): string {
  return PUSH_REGISTRATION_PREFIX + JSON.stringify(registration);
}

/** The producer could not push `blockIds` (the consumer's ids) of the consumer's request `reqId`. */
export function pushNackNotification(reqId: string, blockIds: readonly number[]): string {
  return `${PUSH_NACK_PREFIX}${reqId}:${blockIds.join(',')}`;
}

/** Who handles each kind of notification a worker receives. */
export interface NotificationHandlers {
  heartbeat(reqIds: string[]): void;
  /** `json` is the registration as sent; the handler validates it. */
  registration(json: string): void;
  /** `blockIds` empty: every block of the request. */
  nack(reqId: string, blockIds: number[]): void;
  completion(reqId: string, worldSize: number): void;
  unknown(n: Notification): void;
}

/** Hands one received notification to its handler. */
export function routeNotification(n: Notification, to: NotificationHandlers): void {
  const m = n.message;
  if (m.startsWith(HEARTBEAT_PREFIX)) {
    to.heartbeat(m.slice(HEARTBEAT_PREFIX.length).split(',').filter(Boolean));
  } else if (m.startsWith(PUSH_REGISTRATION_PREFIX)) {
    to.registration(m.slice(PUSH_REGISTRATION_PREFIX.length));
  } else if (m.startsWith(PUSH_NACK_PREFIX)) {
    const body = m.slice(PUSH_NACK_PREFIX.length);
    const i = body.lastIndexOf(':');
    const ids =
      i < 0
        ? []
        : body
            .slice(i + 1)
            .split(',')
            .filter(Boolean)
            .map(Number);
    to.nack(i < 0 ? body : body.slice(0, i), ids);
  } else {
    const c = parseCompletion(m);
    if (c) to.completion(c.reqId, c.count);
    else to.unknown(n);
  }
}
