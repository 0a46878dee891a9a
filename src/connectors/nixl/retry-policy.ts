/**
 * What a NIXL consumer does after a READ failed: post it again after a backoff (the producer
 * had not created the grant yet, or had too many READs waiting for grants), handshake again and post once more (the connection to the producer failed: it may
 * have restarted elsewhere under the same engine id), or give up. Decided on the failure's
 * cause (transfer/failure.ts), never on its wording. Used by the pull paths of both tensor
 * parallel layouts (pull-reader.ts, hetero-reader.ts).
 */
import { isRetryableCause, type TransferStatus } from '../../transfer/index.ts';

const RETRY_BASE_MS = 50;
const RETRY_MAX_MS = 1000;

/**
 * How long to wait before posting again the READ that ended in `status`, after `attempts`
 * retries: null when its failure is not retryable or the wait would end more than `budgetMs`
 * (the producer's lease) after the first post.
 */
export function readRetryDelayMs(
  status: TransferStatus,
  attempts: number,
  firstPostAt: number,
  budgetMs: number,
  now = performance.now(),
): number | null {
  if (!isRetryableCause(status.cause)) return null;
  const delay = Math.min(RETRY_BASE_MS * 2 ** attempts, RETRY_MAX_MS);
  return now + delay - firstPostAt > budgetMs ? null : delay;
}

/** Whether to handshake with the producer again and post once more: its connection failed, for the first time. */
export function shouldReconnect(status: TransferStatus, reconnectedBefore: boolean): boolean {
  return !reconnectedBefore && status.cause === 'connection_lost';
}
