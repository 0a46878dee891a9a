/**
 * The producer's hold on finished requests' blocks
 * (docs/connectors/nixl.md#how-a-request-flows-pull): a READ grant keyed by the request id, a
 * lease renewed by the consumer's heartbeats (extend only), and completion counting. Expiry
 * revokes the grant, so a late READ is refused and surfaces as a load error on the consumer
 * instead of returning freed blocks (vLLM only logs such a late READ).
 */
import { getLogger } from '../../logging/logger.ts';
import type { TransferAgent } from '../../transfer/index.ts';
import { LeaseHeap } from './lease-heap.ts';
import type { SendJob } from './step-metadata.ts';
import { consumersPerProducer } from './tp-mapping.ts';

const log = getLogger('kvconnect.connectors.nixl.producer-leases');

export class ProducerLeases {
  readonly #agent: TransferAgent;
  readonly #leaseMs: number;
  readonly #tpSize: number;
  readonly #heap = new LeaseHeap();
  readonly #reads = new Map<string, number>();
  /** Completions that arrived before the request's blocks were handed to this worker. */
  readonly #early = new Map<string, { worldSize: number; notes: number; at: number }>();
  #done: string[] = [];
  #expired = 0;
  /** Completions for a request whose lease had expired (vLLM's num_notifications_after_expiry). */
  #afterExpiry = 0;
  /** Requests whose lease expired, by expiry time, kept one lease period to recognise late readers. */
  readonly #recentlyExpired = new Map<string, number>();

  constructor(agent: TransferAgent, leaseSeconds: number, tpSize: number) {
    this.#agent = agent;
    this.#leaseMs = leaseSeconds * 1000;
    this.#tpSize = tpSize;
  }

  has(reqId: string): boolean {
    return this.#heap.has(reqId);
  }

  add(job: SendJob): void {
    const expiresAt = Date.now() + job.leaseSeconds * 1000;
    const blockIds = job.blocks.flatMap((g) => g.ids).filter((id) => id !== 0);
    this.#agent.grantRead(job.reqId, { blockIds, expiresAt });
    this.#heap.set(job.reqId, expiresAt);
    this.#reads.set(job.reqId, 0);
    const early = this.#early.get(job.reqId);
    if (early) {
      this.#early.delete(job.reqId);
      for (let i = 0; i < early.notes; i++) this.completion(job.reqId, early.worldSize);
    }
  }

  /** Heartbeat: each named lease moves to now + 2/3 of the lease duration, never earlier. */
  heartbeat(reqIds: readonly string[]): void {
    const target = Date.now() + Math.floor((this.#leaseMs * 2) / 3);
    for (const id of reqIds) {
      if (!this.#heap.has(id)) continue;
      const expiresAt = this.#heap.set(id, target, false);
      this.#agent.renewGrant(id, expiresAt);
    }
  }

  /** One consumer rank reported completion ("{id}:{consumer world size}"). */
  completion(reqId: string, consumerWorldSize: number): void {
    const seen = this.#reads.get(reqId);
    if (seen === undefined) {
      log.warn(
        'Potentially invalid KV blocks for unrecognized request %s were retrieved by a decode worker. They may have expired.',
        reqId,
      );
      if (this.#recentlyExpired.has(reqId)) {
        this.#afterExpiry++;
        return;
      }
      // Several consumer ranks may report before the blocks arrive (heterogeneous TP).
      const prev = this.#early.get(reqId);
      this.#early.set(reqId, { worldSize: consumerWorldSize, notes: (prev?.notes ?? 0) + 1, at: Date.now() });
      return;
    }
    this.#reads.set(reqId, seen + 1);
    if (seen + 1 >= consumersPerProducer(this.#tpSize, consumerWorldSize)) this.finish(reqId);
  }

  /** The blocks go back to the pool: revoke the grant and report finished_sending. */
  finish(reqId: string): void {
    if (!this.#heap.has(reqId)) return;
    this.#heap.delete(reqId);
    this.#reads.delete(reqId);
    this.#agent.revokeGrant(reqId);
    this.#done.push(reqId);
  }

  expire(now = Date.now()): void {
    for (const id of this.#heap.popExpired(now)) {
      log.warn(
        'Releasing expired KV blocks for request %s which were retrieved by %d remote worker(s) before lease expired.',
        id,
        this.#reads.get(id) ?? 0,
      );
      this.#reads.delete(id);
      this.#agent.revokeGrant(id);
      this.#done.push(id);
      this.#expired++;
      this.#recentlyExpired.set(id, now);
    }
    for (const [id, at] of this.#recentlyExpired)
      if (now - at > this.#leaseMs) this.#recentlyExpired.delete(id);
    for (const [id, e] of this.#early) if (now - e.at > this.#leaseMs) this.#early.delete(id);
  }

  takeDone(): string[] {
    const d = this.#done;
    this.#done = [];
    return d;
  }

  takeExpiredCount(): number {
    const n = this.#expired;
    this.#expired = 0;
    return n;
  }

  /** Completions reported after their request's lease expired, since the last call. */
  takeAfterExpiryCount(): number {
    const n = this.#afterExpiry;
    this.#afterExpiry = 0;
    return n;
  }
}
