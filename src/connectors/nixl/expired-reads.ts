/**
 * Bidirectional, P reading the blocks D kept for a next turn
 * (docs/connectors/nixl.md#multi-turn-bidirectional): a READ of blocks that expire on D
 * within vLLM's safety margin is declined, the request's blocks are reported invalid
 * (kv_load_failure_policy decides) and D frees them at its TTL. The pull readers ask once
 * their handshake told D's clock; the declines count as num_kv_expired_reqs.
 */
import { getLogger } from '../../logging/logger.ts';
import type { RecvJob } from './step-metadata.ts';

const log = getLogger('kvconnect.connectors.nixl.expired-reads');

/** vLLM's margin: a READ of D's kept blocks is declined when they expire within it. */
const KV_BLOCKS_EXPIRY_SAFETY_MARGIN_MS = 5000;

export class ExpiredReads {
  #declined = 0;

  /**
   * True (logged and counted) when `job` reads blocks that expire within the margin;
   * `offsetMs`: the remote's clock minus this one, known once the handshake is done.
   */
  decline(job: RecvJob, offsetMs: number | undefined): boolean {
    const deadline = job.blocksExpiryTime;
    if (deadline === undefined || deadline === null) return false;
    if (performance.now() + KV_BLOCKS_EXPIRY_SAFETY_MARGIN_MS < deadline * 1000 - (offsetMs ?? 0))
      return false;
    log.warn('Declining expired remote read for %s from engine %s.', job.reqId, job.remote.engineId);
    this.#declined++;
    return true;
  }

  /** The reads declined since the last call. */
  takeCount(): number {
    const n = this.#declined;
    this.#declined = 0;
    return n;
  }
}
