/**
 * Push mode on the workers (docs/connectors/nixl.md#how-a-request-flows-push). The consumer
 * grants WRITE on its registered blocks to the producer's engine and sends the registration
 * as a notification; the producer matches registrations with finished requests (either may
 * arrive first; exact id, then base id), WRITEs, and on a failed WRITE sends a negative
 * acknowledgement so the consumer reports the load failure at once instead of waiting for a
 * timeout.
 */

import { pairByPosition } from '../../connector/block-lists.ts';
import { getLogger } from '../../logging/logger.ts';
import type { TransferHandle } from '../../transfer/index.ts';
import {
  completionNotification,
  pushNackNotification,
  pushRegistrationNotification,
} from './notifications.ts';
import { baseRequestId, type PushRegistration, type RegisterJob, type SendJob } from './step-metadata.ts';
import type { WorkerContext } from './worker-context.ts';

const log = getLogger('kvconnect.connectors.nixl.push-worker');

interface Write {
  readonly producerReqId: string;
  readonly registration: PushRegistration;
  readonly consumerAgent: string;
  readonly toConsumerId: Map<number, number>;
  readonly handle: TransferHandle;
}

export class PushProducer {
  readonly #ctx: WorkerContext;
  readonly #registrations = new Map<string, PushRegistration>();
  readonly #finished = new Map<string, SendJob>();
  readonly #writes = new Set<Write>();
  #starting = 0;

  constructor(ctx: WorkerContext) {
    this.#ctx = ctx;
  }

  get busy(): boolean {
    return this.#writes.size > 0 || this.#starting > 0;
  }

  finished(job: SendJob): void {
    this.#finished.set(job.reqId, job);
    this.#match();
  }

  registration(json: string): void {
    let reg: PushRegistration;
    try {
      reg = JSON.parse(json) as PushRegistration;
      if (
        typeof reg.request_id !== 'string' ||
        typeof reg.decode_engine_id !== 'string' ||
        !Array.isArray(reg.blocks)
      ) {
        throw new Error('missing fields');
      }
    } catch (e) {
      log.warn('NixlPushConnector: dropping a malformed registration: %s', String(e));
      return;
    }
    this.#registrations.set(reg.request_id, reg);
    this.#match();
  }

  #match(): void {
    for (const [id, reg] of this.#registrations) {
      const pid = this.#producerIdFor(reg);
      if (pid === null) continue;
      const job = this.#finished.get(pid)!;
      this.#registrations.delete(id);
      this.#finished.delete(pid);
      this.#write(pid, job, reg);
    }
  }

  #producerIdFor(reg: PushRegistration): string | null {
    if (reg.remote_request_id !== null && this.#finished.has(reg.remote_request_id))
      return reg.remote_request_id;
    if (this.#finished.has(reg.request_id)) return reg.request_id;
    const base = baseRequestId(reg.request_id);
    for (const pid of this.#finished.keys()) if (baseRequestId(pid) === base) return pid;
    return null;
  }

  #write(pid: string, job: SendJob, reg: PushRegistration): void {
    const ctx = this.#ctx;
    if (!ctx.leases.has(pid)) return; // lease already expired: the blocks are gone
    const pairs = pairByPosition(reg.blocks, job.blocks);
    const consumerIds = pairs.local.flat();
    const producerIds = pairs.remote.flat();
    const notification = completionNotification(reg.request_id, ctx.tpSize);
    const remote = {
      engineId: reg.decode_engine_id,
      host: reg.decode_host,
      port: reg.decode_port,
      tpSize: reg.decode_tp_size,
    };
    this.#starting++;
    ctx
      .connect(remote)
      .then(async (agentName) => {
        if (producerIds.length === 0) {
          ctx.leases.finish(pid);
          if (reg.blocks.some((g) => g.ids.length > 0))
            await ctx.agent.sendNotification(agentName, notification);
          return;
        }
        try {
          const handle = ctx.agent.write(agentName, ctx.regionPairs(producerIds, consumerIds), {
            notification,
          });
          const toConsumerId = new Map(producerIds.map((p, i) => [p, consumerIds[i]!]));
          this.#writes.add({
            producerReqId: pid,
            registration: reg,
            consumerAgent: agentName,
            toConsumerId,
            handle,
          });
          // The WRITE's end frees the blocks (poll, the next step): let that step run now.
          ctx.wakeWhenSettled(handle);
        } catch (e) {
          log.error('NIXL transfer failure: transfer_setup_failed | Context: push %s: %s', pid, String(e));
          ctx.leases.finish(pid);
          await this.#nack(agentName, reg.request_id, consumerIds);
        }
      })
      .catch((e: unknown) => {
        log.error(
          'NIXL transfer failure: push_handshake_failed | Context: push %s to %s: %s',
          pid,
          remote.engineId,
          String(e),
        );
      })
      .finally(() => this.#starting--);
  }

  #nack(agentName: string, consumerReqId: string, consumerIds: readonly number[]): Promise<void> {
    return this.#ctx.agent
      .sendNotification(agentName, pushNackNotification(consumerReqId, consumerIds))
      .catch((e: unknown) =>
        log.warn('NixlPushConnector: failure notice to %s failed: %s', consumerReqId, String(e)),
      );
  }

  poll(): void {
    const agent = this.#ctx.agent;
    for (const w of [...this.#writes]) {
      const status = agent.status(w.handle);
      if (status.state === 'PROC') continue;
      this.#writes.delete(w);
      agent.releaseHandle(w.handle);
      this.#ctx.leases.finish(w.producerReqId);
      if (status.state === 'ERR') {
        log.error(
          'NIXL transfer failure: transfer_failed | Context: push %s: %s',
          w.producerReqId,
          status.reason ?? '',
        );
        const failed = status.failedBlockIds
          .map((p) => w.toConsumerId.get(p))
          .filter((x): x is number => x !== undefined);
        void this.#nack(
          w.consumerAgent,
          w.registration.request_id,
          failed.length > 0 ? failed : [...w.toConsumerId.values()],
        );
      }
    }
  }
}

interface Wait {
  readonly job: RegisterJob;
  readonly expected: number;
  seen: number;
  readonly deadline: number;
}

export class PushConsumer {
  readonly #ctx: WorkerContext;
  readonly #waits = new Map<string, Wait>();

  constructor(ctx: WorkerContext) {
    this.#ctx = ctx;
  }

  get busy(): boolean {
    return this.#waits.size > 0;
  }

  register(job: RegisterJob): void {
    const ctx = this.#ctx;
    const ids = job.registration.blocks.flatMap((g) => g.ids);
    if (job.wait) {
      ctx.agent.grantWrite(job.reqId, { peer: job.remote.engineId, blockIds: ids });
      // A deadline owned by the side that pinned the blocks (vLLM #46283).
      const deadline = Date.now() + (ctx.opts.kvLeaseDuration + ctx.opts.transferTimeout) * 1000;
      const expected = Math.max(1, Math.floor(job.remote.tpSize / ctx.tpSize));
      this.#waits.set(job.reqId, { job, expected, seen: 0, deadline });
    }
    ctx
      .connect(job.remote)
      .then((name) => ctx.agent.sendNotification(name, pushRegistrationNotification(job.registration)))
      .catch((e: unknown) => {
        log.error(
          'NixlPushConnector: cannot send registration for %s to %s: %s',
          job.reqId,
          job.remote.engineId,
          String(e),
        );
        this.#fail(job.reqId, ids);
      });
  }

  /** True if the notification completed (part of) a push this consumer waits for. */
  completion(reqId: string, _producerWorldSize: number): boolean {
    const w = this.#waits.get(reqId);
    if (!w) return false;
    w.seen++;
    if (w.seen >= w.expected) {
      this.#waits.delete(reqId);
      this.#ctx.agent.revokeGrant(reqId);
      this.#ctx.recvDone(reqId, []);
    }
    return true;
  }

  /** The producer could not push these blocks of `reqId` (none listed: all of them). */
  nack(reqId: string, ids: readonly number[]): void {
    const w = this.#waits.get(reqId);
    if (!w) return;
    log.error('NIXL transfer failure: transfer_failed | Context: the producer could not push %s', reqId);
    this.#fail(reqId, ids.length > 0 ? ids : w.job.registration.blocks.flatMap((g) => g.ids));
  }

  #fail(reqId: string, invalid: readonly number[]): void {
    if (!this.#waits.delete(reqId)) return;
    this.#ctx.agent.revokeGrant(reqId);
    this.#ctx.recvDone(reqId, invalid);
  }

  poll(now = Date.now()): void {
    for (const [id, w] of this.#waits) {
      if (now < w.deadline) continue;
      log.warn(
        'NixlPushConnector: registration for request %s timed out after %ss without a push completion',
        id,
        ((now - w.deadline) / 1000 + this.#ctx.opts.kvLeaseDuration + this.#ctx.opts.transferTimeout).toFixed(
          1,
        ),
      );
      this.#fail(
        id,
        w.job.registration.blocks.flatMap((g) => g.ids),
      );
    }
  }
}
