/**
 * Consumer half of a MoRIIO worker. WRITE: grant the producer write access to the
 * request's blocks, announce them (remote_blocks) to every producer rank mapped to this
 * rank, and report the request received once every expected write_done arrived, or failed
 * after transfer_timeout. READ: pull each layer's blocks at the start of the step and hold
 * each layer until its read landed; then release the producer's blocks.
 */
import { getLogger } from '../../logging/logger.ts';
import type { TransferHandle } from '../../transfer/index.ts';
import { moriioPort } from './config.ts';
import { emitMoRIIOEvent } from './events.ts';
import { sendNotify } from './notify-channel.ts';
import type { FailedLoad, ReadJob, WriteRecvJob } from './step-metadata.ts';
import { moriioExpectedWriteDoneCount, moriioPeerRanks, validateMoRIIOHeterogeneousTp } from './tp.ts';
import { type MoRIIOWorkerContext, transferTimeoutMessage } from './worker-context.ts';

const log = getLogger('kvconnect.connectors.moriio.consumer');

interface Incoming {
  readonly job: WriteRecvJob;
  readonly expected: number;
  received: number;
  readonly timer: NodeJS.Timeout;
}

interface PendingRead {
  readonly job: ReadJob;
  /** region → handle, once the handshake completed. */
  readonly handles: Map<number, TransferHandle>;
  failed: boolean;
}

export class MoRIIOConsumer {
  readonly #ctx: MoRIIOWorkerContext;
  readonly #incoming = new Map<string, Incoming>();
  #reads: PendingRead[] = [];
  #recving: string[] = [];
  readonly #invalid = new Set<number>();

  constructor(ctx: MoRIIOWorkerContext) {
    this.#ctx = ctx;
  }

  get busy(): boolean {
    return this.#incoming.size > 0;
  }

  failLoads(jobs: readonly FailedLoad[]): void {
    for (const j of jobs) {
      for (const id of j.blockIds) this.#invalid.add(id);
      if (j.async) this.#recving.push(j.reqId);
    }
  }

  // ---- WRITE ----

  expectWrites(job: WriteRecvJob): void {
    const ctx = this.#ctx;
    const fail = (why: string): void => this.#failIncoming(job.transferId, why);
    const timeoutS = ctx.cfg.transferTimeoutS;
    const timer = setTimeout(() => {
      ctx.stats.timedOut();
      fail(transferTimeoutMessage(timeoutS));
    }, timeoutS * 1000);
    timer.unref();
    this.#incoming.set(job.transferId, {
      job,
      expected: moriioExpectedWriteDoneCount(job.peer.tpSize, ctx.tpSize),
      received: 0,
      timer,
    });
    try {
      validateMoRIIOHeterogeneousTp(ctx.totalKvHeads, ctx.tpSize, job.peer.tpSize);
    } catch (e) {
      fail((e as Error).message);
      return;
    }
    ctx.agent.grantWrite(job.transferId, { blockIds: job.blockIds });
    for (const r of moriioPeerRanks(ctx.tpRank, ctx.tpSize, job.peer.tpSize)) {
      const port = moriioPort(job.peer.notifyPort, job.peer.dpRankLocal, job.peer.tpSize, r);
      sendNotify(job.peer.host, port, {
        type: 'remote_blocks',
        req_id: job.reqId,
        transfer_id: job.transferId,
        block_notify_list: job.blockIds,
        block_positions: job.positions,
        decode_rank: ctx.cfg.dpRankLocal,
        decode_tp_rank: ctx.tpRank,
        decode_tp_size: ctx.tpSize,
        decode_host: ctx.cfg.hostIp,
        decode_handshake_port: ctx.handshakePort,
        decode_notify_port: ctx.notifyPort,
      }).catch((e: unknown) => {
        ctx.stats.failedNotification();
        fail((e as Error).message);
      });
    }
  }

  writeDone(transferId: string): void {
    const inc = this.#incoming.get(transferId);
    if (!inc) return;
    inc.received++;
    if (inc.received < inc.expected) return;
    clearTimeout(inc.timer);
    this.#incoming.delete(transferId);
    this.#ctx.agent.revokeGrant(transferId);
    emitMoRIIOEvent('recv_complete', transferId);
    this.#recving.push(inc.job.reqId);
  }

  #failIncoming(transferId: string, why: string): void {
    const inc = this.#incoming.get(transferId);
    if (!inc) return;
    clearTimeout(inc.timer);
    this.#incoming.delete(transferId);
    this.#ctx.agent.revokeGrant(transferId);
    log.error('MoRIIO transfer %s for request %s failed: %s', transferId, inc.job.reqId, why);
    for (const id of inc.job.blockIds) this.#invalid.add(id);
    this.#recving.push(inc.job.reqId);
  }

  // ---- READ ----

  /** Handshakes and posts one READ per layer for every job of this step. */
  async startReads(jobs: readonly ReadJob[]): Promise<void> {
    const ctx = this.#ctx;
    for (const job of jobs) {
      const pending: PendingRead = { job, handles: new Map(), failed: false };
      this.#reads.push(pending);
      if (job.localBlockIds.length === 0) continue;
      try {
        validateMoRIIOHeterogeneousTp(ctx.totalKvHeads, ctx.tpSize, job.peer.tpSize);
        const [src = 0] = moriioPeerRanks(ctx.tpRank, ctx.tpSize, job.peer.tpSize);
        const port = moriioPort(job.peer.handshakePort, job.peer.dpRankLocal, job.peer.tpSize, src);
        const name = await ctx.connect(job.peer.host, port, src, job.peer.tpSize);
        for (const region of ctx.regions) {
          const pairs = [
            {
              localRegion: region,
              localBlockIds: job.localBlockIds,
              remoteRegion: region,
              remoteBlockIds: job.remoteBlockIds,
            },
          ];
          pending.handles.set(region, ctx.agent.read(name, pairs, { grantKey: job.transferId }));
        }
      } catch (e) {
        ctx.stats.failedTransfer();
        this.#failRead(pending, (e as Error).message);
      }
    }
  }

  /** Resolves once every READ of this layer's region landed (or failed). */
  async waitForRegion(region: number): Promise<void> {
    for (const pending of this.#reads) {
      const handle = pending.handles.get(region);
      if (!handle) continue;
      pending.handles.delete(region);
      const status = await this.#ctx.agent.waitFor(handle);
      this.#ctx.agent.releaseHandle(handle);
      if (status.state !== 'DONE') {
        const timedOut = status.cause === 'timeout';
        if (timedOut) this.#ctx.stats.timedOut();
        const why = timedOut
          ? transferTimeoutMessage(this.#ctx.cfg.transferTimeoutS)
          : (status.reason ?? 'transfer failed');
        this.#failRead(pending, why);
      }
    }
  }

  /** After the forward pass: every read settled; tell the producer ranks to free their blocks. */
  async finishReads(): Promise<void> {
    for (const region of this.#ctx.regions) await this.waitForRegion(region);
    const ctx = this.#ctx;
    for (const { job, failed } of this.#reads) {
      if (!failed && job.localBlockIds.length > 0) emitMoRIIOEvent('reads_complete', job.transferId);
      for (const r of moriioPeerRanks(ctx.tpRank, ctx.tpSize, job.peer.tpSize)) {
        const port = moriioPort(job.peer.notifyPort, job.peer.dpRankLocal, job.peer.tpSize, r);
        sendNotify(job.peer.host, port, {
          type: 'release',
          transfer_id: job.transferId,
          consumer_tp_size: ctx.tpSize,
        }).catch((e: unknown) => {
          ctx.stats.failedNotification();
          log.warn('MoRIIO release of %s failed: %s', job.transferId, (e as Error).message);
        });
      }
    }
    this.#reads = [];
  }

  #failRead(pending: PendingRead, why: string): void {
    if (pending.failed) return;
    pending.failed = true;
    log.error(
      'RDMA transfer failed for request %s: %s (code=%s). Notifying prefill to free blocks; request will be aborted by timeout.',
      pending.job.reqId,
      why,
      'ERR',
    );
    for (const id of pending.job.localBlockIds) this.#invalid.add(id);
  }

  takeRecving(): string[] {
    const out = this.#recving;
    this.#recving = [];
    return out;
  }

  takeInvalid(): number[] {
    const ids = [...this.#invalid];
    this.#invalid.clear();
    return ids;
  }

  shutdown(): void {
    for (const inc of this.#incoming.values()) clearTimeout(inc.timer);
    this.#incoming.clear();
  }
}
