/**
 * Producer-side ACK reconciliation
 * (docs/connectors/moriio.md#holding-and-releasing-ps-blocks): the worker's finished_sending
 * ids are matched against the requests the scheduler is holding. ACKs that arrive before the
 * request finished are parked; holds that never get an ACK are reaped after defer_timeout.
 */
import { getLogger } from '../../logging/logger.ts';

const log = getLogger('kvconnect.connectors.moriio.ack-reconciler');

export class AckReconciler {
  readonly #deferTimeoutMs: number;
  readonly #now: () => number;
  /** reqId → deadline of a held request (request_finished returned delay). */
  readonly #deferred = new Map<string, { deadline: number; transferId: string }>();
  /** reqId → deadline of an ACK that arrived before its request finished. */
  readonly #parked = new Map<string, number>();

  constructor(deferTimeoutS: number, now: () => number = () => performance.now()) {
    this.#deferTimeoutMs = deferTimeoutS * 1000;
    this.#now = now;
  }

  defer(reqId: string, transferId: string): void {
    this.#deferred.set(reqId, { deadline: this.#now() + this.#deferTimeoutMs, transferId });
  }

  get held(): number {
    return this.#deferred.size;
  }

  /** Rewrites a step's finished_sending; `reaped` receives the transfer ids given up on. */
  reconcile(
    acks: readonly string[] | null,
    reaped: (transferId: string) => void = () => {},
  ): string[] | null {
    const now = this.#now();
    const safe = new Set<string>();
    for (const id of acks ?? []) {
      if (this.#deferred.has(id)) safe.add(id);
      else this.#parked.set(id, now + this.#deferTimeoutMs);
    }
    for (const id of this.#parked.keys()) {
      if (this.#deferred.has(id)) {
        safe.add(id);
        this.#parked.delete(id);
      }
    }
    let reapedCount = 0;
    for (const [id, d] of this.#deferred) {
      if (safe.has(id) || d.deadline > now) continue;
      safe.add(id);
      reapedCount++;
      reaped(d.transferId);
    }
    if (reapedCount > 0) {
      log.warn(
        'Reaped %d deferred sends with no finished_sending notification after %ss. This indicates lost async KV completion notifications from the KV connector.',
        reapedCount,
        (this.#deferTimeoutMs / 1000).toFixed(0),
      );
    }
    for (const id of safe) this.#deferred.delete(id);
    for (const [id, deadline] of this.#parked) if (deadline <= now) this.#parked.delete(id);
    return safe.size > 0 ? [...safe] : null;
  }
}
