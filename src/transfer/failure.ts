/**
 * Why a transfer failed, as a closed set of causes. A failed TransferStatus and the
 * `xfer_err` frame carry one, beside a `reason` written for people. Code that decides
 * anything about a failure (retry, reconnect, count a timeout) switches on the cause and
 * never reads the reason, so rewording a message changes no behaviour.
 */

/** Every cause, in the order docs/transfer.md#why-a-transfer-failed lists them. */
export const TRANSFER_FAILURE_CAUSES = [
  /** The owner has not created the READ's named grant (the wait for it ran out, or waiting is off). */
  'not_granted_yet',
  /** The READ would have waited for its grant, but this peer already has too many READs waiting. */
  'grant_quota',
  /** The grant was revoked or expired: before the transfer, while it waited, or while it was served. */
  'grant_ended',
  /** No live grant covers these blocks for this peer (another peer's, other blocks, none at all). */
  'not_granted',
  /** A run lies outside the owner's registered regions. */
  'out_of_bounds',
  /** Blocks arrived but failed checksum verification (here, or at the receiver of a WRITE). */
  'checksum',
  /** The transfer was still in flight when its deadline (transferTimeoutMs) passed. */
  'timeout',
  /** The connection to the peer failed or ended: refused, reset, closed, or its handshake failed. */
  'connection_lost',
  /** This side could not send the transfer's frames or data (a socket or staging-ring error). */
  'send_failed',
  /** This agent was closed while the transfer was in flight. */
  'closed',
  /** The agent's worker thread failed (ThreadedTransferAgent). */
  'thread_failed',
  /** The agent's thread refused to post the transfer (its own checks failed there). */
  'rejected',
] as const;

export type TransferFailureCause = (typeof TRANSFER_FAILURE_CAUSES)[number];

/** One failure: the cause code decides on, and the sentence a person reads. */
export interface TransferFailure {
  readonly cause: TransferFailureCause;
  readonly reason: string;
}

const CAUSES: ReadonlySet<string> = new Set(TRANSFER_FAILURE_CAUSES);

export function isTransferFailureCause(value: unknown): value is TransferFailureCause {
  return typeof value === 'string' && CAUSES.has(value);
}

/**
 * True when posting the same transfer again may succeed: the owner had not created the
 * named grant yet, or had too many READs of this peer waiting for grants. A grant that was
 * revoked or expired is never retryable.
 */
export function isRetryableCause(cause: TransferFailureCause | undefined): boolean {
  return cause === 'not_granted_yet' || cause === 'grant_quota';
}
