/**
 * Producer half of a MoRIIO worker. WRITE: every layer's freshly computed blocks are
 * written into the consumer's blocks as soon as the layer is done (saveKvLayer), to every
 * consumer rank that registered; when the prompt is done and all writes landed, each
 * consumer rank gets write_done and the request is reported finished_sending. READ: the
 * request's blocks are granted for reading and released after the expected ACK count.
 */
import { getLogger } from '../../logging/logger.ts';
import type { TransferHandle } from '../../transfer/index.ts';
import { emitMoRIIOEvent } from './events.ts';
import type { RemoteBlocksMessage } from './notify-channel.ts';
import { sendNotify } from './notify-channel.ts';
import type { SaveJob, SendJob } from './step-metadata.ts';
import { moriioExpectedAckCount, validateMoRIIOHeterogeneousTp } from './tp.ts';
import type { MoRIIOWorkerContext } from './worker-context.ts';

const log = getLogger('kvconnect.connectors.moriio.producer');

/** How long waitForSave waits for a finished prefill's last layer pushes. */
const SAVE_WAIT_MS = 20;

interface Registration {
  readonly msg: RemoteBlocksMessage;
  agent: Promise<string> | null;
  failed: boolean;
}

interface Outgoing {
  readonly transferId: string;
  reqId: string | null;
  blockIds: number[];
  /** Computed blocks per region: position → local block id. */
  readonly computed: Map<number, Map<number, number>>;
  readonly registrations: Registration[];
  expectedRegistrations: number | null;
  prefillDone: boolean;
  readonly writes: Set<Promise<void>>;
  acks: number;
  expectedAcks: number | null;
  released: boolean;
  finished: boolean;
  readonly createdAt: number;
}

export class MoRIIOProducer {
  readonly #ctx: MoRIIOWorkerContext;
  readonly #byTransfer = new Map<string, Outgoing>();
  /** Saves of the current step (the layers' writes use them). */
  #step: SaveJob[] = [];
  #done: string[] = [];
  #dropped = new Map<string, number>();

  constructor(ctx: MoRIIOWorkerContext) {
    this.#ctx = ctx;
  }

  get busy(): boolean {
    return this.#byTransfer.size > 0;
  }

  #get(transferId: string): Outgoing {
    let t = this.#byTransfer.get(transferId);
    if (!t) {
      t = {
        transferId,
        reqId: null,
        blockIds: [],
        computed: new Map(),
        registrations: [],
        expectedRegistrations: null,
        prefillDone: false,
        writes: new Set(),
        acks: 0,
        expectedAcks: null,
        released: false,
        finished: false,
        createdAt: performance.now(),
      };
      this.#byTransfer.set(transferId, t);
    }
    return t;
  }

  beginStep(saves: readonly SaveJob[], sends: readonly SendJob[], dropped: readonly string[]): void {
    for (const tx of dropped) this.#drop(tx);
    this.#step = saves.filter((s) => !this.#dropped.has(s.transferId));
    for (const s of this.#step) {
      const t = this.#get(s.transferId);
      t.reqId = s.reqId;
      t.blockIds = s.blockIds;
    }
    for (const s of sends) {
      const t = this.#byTransfer.get(s.transferId);
      if (t && this.#ctx.cfg.readMode)
        t.expectedAcks ??= moriioExpectedAckCount(this.#ctx.tpSize, s.consumerTpSize);
      if (t) this.#maybeFinish(t);
    }
  }

  /** WRITE: this layer's KV for this step's requests is in the cache; push it now. */
  saveLayer(region: number): boolean {
    if (this.#ctx.cfg.readMode) return false;
    let posted = false;
    for (const s of this.#step) {
      const t = this.#byTransfer.get(s.transferId);
      if (!t || t.finished) continue;
      const bs = this.#blockSize();
      const first = Math.floor(s.start / bs);
      const lastPos = Math.ceil(s.end / bs);
      const fresh = new Map<number, number>();
      const full: number[] = [];
      for (let pos = first; pos < lastPos; pos++) {
        const id = s.blockIds[pos];
        if (id === undefined) continue;
        fresh.set(pos, id);
        if ((pos + 1) * bs <= s.end) full.push(id);
      }
      // This layer's full blocks are final: their checksums are recorded now (on the agent's
      // thread when threaded, before the WRITEs below reach it), so a WRITE of full blocks is
      // sent without hashing, and over shm the consumer copies it straight from this KV
      // (a pulled WRITE). A partial last block changes with the next chunk: it is hashed as it
      // is sent.
      if (full.length > 0) this.#ctx.agent.recordBlocks(full, [region]);
      let map = t.computed.get(region);
      if (!map) {
        map = new Map();
        t.computed.set(region, map);
      }
      for (const [pos, id] of fresh) map.set(pos, id);
      for (const reg of t.registrations) posted = this.#write(t, reg, region, fresh) || posted;
    }
    return posted;
  }

  /**
   * WRITE: a request of this step waits for a consumer rank's registration (where its blocks
   * go). The worker then lets the event loop turn after each layer, so a registration that
   * arrives while the forward pass runs is taken and the layers are pushed as they are done.
   */
  get awaitingRegistration(): boolean {
    if (this.#ctx.cfg.readMode) return false;
    for (const s of this.#step) {
      const t = this.#byTransfer.get(s.transferId);
      if (!t || t.finished) continue;
      if (t.expectedRegistrations === null || t.registrations.length < t.expectedRegistrations) return true;
    }
    return false;
  }

  /**
   * After the forward pass: requests whose last prompt token was computed are complete.
   * Resolves when their layer pushes have settled, or after SAVE_WAIT_MS: the last layer's push
   * is in flight when the forward pass ends, and awaiting it here sends write_done as soon as
   * it lands instead of after the rest of the step (a push that takes longer is not waited
   * for; write_done then follows it as before).
   */
  endStep(): Promise<void> {
    const pending: Promise<void>[] = [];
    for (const s of this.#step) {
      // READ: the blocks hold this step's KV now. A grant is a lease on blocks that no longer
      // change (the agent records their checksums when it grants them), so it is made here,
      // after the forward pass, not before it.
      if (this.#ctx.cfg.readMode) this.#ctx.agent.grantRead(s.transferId, { blockIds: s.blockIds });
      const t = this.#byTransfer.get(s.transferId);
      if (t && s.last) {
        t.prefillDone = true;
        this.#maybeFinish(t);
        if (!t.finished) pending.push(...t.writes);
      }
    }
    this.#step = [];
    if (pending.length === 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, SAVE_WAIT_MS);
      void Promise.allSettled(pending).then(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /** A consumer rank announced its blocks (WRITE). */
  registration(msg: RemoteBlocksMessage): void {
    if (this.#dropped.has(msg.transfer_id)) return;
    const t = this.#get(msg.transfer_id);
    const ctx = this.#ctx;
    try {
      validateMoRIIOHeterogeneousTp(ctx.totalKvHeads, ctx.tpSize, msg.decode_tp_size);
    } catch (e) {
      ctx.stats.failedTransfer();
      log.error('%s', (e as Error).message);
      return;
    }
    t.expectedRegistrations = msg.decode_tp_size > ctx.tpSize ? msg.decode_tp_size / ctx.tpSize : 1;
    const reg: Registration = { msg, agent: null, failed: false };
    reg.agent = ctx.connect(
      msg.decode_host,
      msg.decode_handshake_port,
      msg.decode_tp_rank,
      msg.decode_tp_size,
    );
    reg.agent.catch((e: unknown) => {
      reg.failed = true;
      ctx.stats.failedTransfer();
      log.error('MoRIIO handshake with decode %s failed: %s', msg.decode_host, (e as Error).message);
    });
    t.registrations.push(reg);
    for (const [region, map] of t.computed) this.#write(t, reg, region, map);
    this.#maybeFinish(t);
  }

  /** A consumer rank finished reading (READ), or the consumer gave the transfer up. */
  release(transferId: string, consumerTpSize: number, abort: boolean): void {
    const t = this.#get(transferId);
    if (abort) t.released = true;
    else {
      t.acks++;
      t.expectedAcks ??= moriioExpectedAckCount(this.#ctx.tpSize, consumerTpSize);
    }
    this.#maybeFinish(t);
  }

  #blockSize(): number {
    return this.#ctx.blockSize;
  }

  #write(t: Outgoing, reg: Registration, region: number, blocks: ReadonlyMap<number, number>): boolean {
    const remoteByPos = new Map<number, number>();
    reg.msg.block_positions.forEach((pos, i) => {
      const id = reg.msg.block_notify_list[i];
      if (id !== undefined) remoteByPos.set(pos, id);
    });
    const local: number[] = [];
    const remote: number[] = [];
    for (const [pos, id] of blocks) {
      const r = remoteByPos.get(pos);
      if (r === undefined) continue;
      local.push(id);
      remote.push(r);
    }
    if (local.length === 0 || !reg.agent || reg.failed) return false;
    if (t.writes.size === 0 && t.computed.size <= 1) emitMoRIIOEvent('first_layer_written', t.transferId);
    const { agent, stats } = this.#ctx;
    const pairs = [
      { localRegion: region, localBlockIds: local, remoteRegion: region, remoteBlockIds: remote },
    ];
    const p = reg.agent
      .then(async (name) => {
        let handle: TransferHandle;
        try {
          handle = agent.write(name, pairs);
        } catch (e) {
          stats.failedTransfer();
          throw e;
        }
        const status = await agent.waitFor(handle);
        agent.releaseHandle(handle);
        if (status.state !== 'DONE') {
          reg.failed = true;
          if (status.cause === 'timeout') stats.timedOut();
          log.error('MoRIIO write of transfer %s failed: %s', t.transferId, status.reason ?? '');
        }
      })
      .catch(() => {
        reg.failed = true;
      });
    t.writes.add(p);
    p.finally(() => {
      t.writes.delete(p);
      this.#maybeFinish(t);
    });
    return true;
  }

  #maybeFinish(t: Outgoing): void {
    if (t.finished || t.reqId === null) return;
    if (!t.released) {
      if (this.#ctx.cfg.readMode) {
        if (t.expectedAcks === null || t.acks < t.expectedAcks) return;
      } else {
        const regs = t.registrations.length;
        if (!t.prefillDone || t.expectedRegistrations === null || regs < t.expectedRegistrations) return;
        if (t.writes.size > 0) return;
        for (const reg of t.registrations) {
          if (reg.failed) continue;
          sendNotify(reg.msg.decode_host, reg.msg.decode_notify_port, {
            type: 'write_done',
            transfer_id: t.transferId,
            tp_rank: this.#ctx.tpRank,
          }).catch((e: unknown) => {
            this.#ctx.stats.failedNotification();
            log.warn('MoRIIO write_done to decode failed: %s', (e as Error).message);
          });
        }
      }
    }
    t.finished = true;
    if (!this.#ctx.cfg.readMode) emitMoRIIOEvent('write_complete', t.transferId);
    this.#ctx.agent.revokeGrant(t.transferId);
    this.#byTransfer.delete(t.transferId);
    this.#done.push(t.reqId);
  }

  #drop(transferId: string): void {
    this.#dropped.set(transferId, performance.now());
    this.#ctx.agent.revokeGrant(transferId);
    this.#byTransfer.delete(transferId);
  }

  takeDone(): string[] {
    const now = performance.now();
    const ttl = this.#ctx.cfg.deferTimeoutS * 1000;
    for (const [tx, at] of this.#dropped) if (now - at > ttl) this.#dropped.delete(tx);
    // State for transfers whose request never showed up here (stray registrations/ACKs).
    for (const t of this.#byTransfer.values()) {
      if (t.reqId === null && now - t.createdAt > ttl) this.#byTransfer.delete(t.transferId);
    }
    const done = this.#done;
    this.#done = [];
    return done;
  }
}
