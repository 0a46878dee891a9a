/**
 * Producer half of a MoRIIO worker. WRITE: the layers a step computed (saveLayer) are written
 * into the consumer's blocks, to every consumer rank that registered, in pushes of whole
 * layers: while the forward pass runs once the layers not yet pushed hold PUSH_MIN_BYTES, and
 * the rest when it ends (endStep). When the prompt is done and all writes landed, each consumer
 * rank gets write_done and the request is reported finished_sending. READ: the request's
 * blocks are granted for reading and released after the expected ACK count.
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

/** How long waitForSave waits for a finished prefill's last pushes. */
export const SAVE_WAIT_MS = 20;

/**
 * The KV a push carries at least while the forward pass runs, bytes per consumer rank. Each
 * push costs both agent threads a fixed amount of work (messages, wake-ups, a completion) on
 * the cores the forward pass computes on: a layer of a few hundred KiB is cheaper to send with
 * the others after the forward pass than to send on its own during it. Layers this large move
 * while the next layers compute, so only the last push is left when the forward pass ends.
 */
export const PUSH_MIN_BYTES = 4 << 20;

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
  /** A WRITE was posted for this transfer (first_layer_written was emitted). */
  pushed: boolean;
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
  /** WRITE: layers (region ids) this step computed and did not push yet, and their bytes. */
  #pending: number[] = [];
  #pendingBytes = 0;
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
        pushed: false,
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
    this.#pending = [];
    this.#pendingBytes = 0;
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

  /**
   * WRITE: this layer's KV for this step's requests is in the cache. True when the layers not
   * pushed yet reach PUSH_MIN_BYTES: the worker then calls pushPending.
   */
  saveLayer(region: number): boolean {
    if (this.#ctx.cfg.readMode) return false;
    const blockBytes = this.#ctx.blockBytes.get(region) ?? 0;
    let blocks = 0;
    for (const s of this.#step) {
      const t = this.#byTransfer.get(s.transferId);
      if (t && !t.finished) blocks += this.#stepBlocks(s).size;
    }
    if (blocks === 0) return false;
    this.#pending.push(region);
    this.#pendingBytes += blocks * blockBytes;
    return this.#pendingBytes >= PUSH_MIN_BYTES;
  }

  /**
   * WRITE: pushes the layers computed and not pushed yet, one WRITE per consumer rank that
   * registered (a rank that registers later gets them on arrival). Returns whether a WRITE was
   * posted.
   */
  pushPending(): boolean {
    const regions = this.#pending;
    this.#pending = [];
    this.#pendingBytes = 0;
    if (regions.length === 0) return false;
    let posted = false;
    for (const s of this.#step) {
      const t = this.#byTransfer.get(s.transferId);
      if (!t || t.finished) continue;
      const fresh = this.#stepBlocks(s);
      const bs = this.#ctx.blockSize;
      const full: number[] = [];
      for (const [pos, id] of fresh) if ((pos + 1) * bs <= s.end) full.push(id);
      // These layers' full blocks are final: their checksums are recorded now (on the agent's
      // thread when threaded, before the WRITEs below reach it), so a WRITE of full blocks is
      // sent without hashing, and over shm the consumer copies it straight from this KV
      // (a pulled WRITE). A partial last block changes with the next chunk: it is hashed as it
      // is sent.
      if (full.length > 0) this.#ctx.agent.recordBlocks(full, regions);
      const layers = new Map<number, ReadonlyMap<number, number>>();
      for (const region of regions) {
        let map = t.computed.get(region);
        if (!map) {
          map = new Map();
          t.computed.set(region, map);
        }
        for (const [pos, id] of fresh) map.set(pos, id);
        layers.set(region, fresh);
      }
      for (const reg of t.registrations) posted = this.#write(t, reg, layers) || posted;
    }
    return posted;
  }

  /** This step's blocks of a save: token-block position → local block id. */
  #stepBlocks(s: SaveJob): Map<number, number> {
    const bs = this.#ctx.blockSize;
    const blocks = new Map<number, number>();
    for (let pos = Math.floor(s.start / bs); pos < Math.ceil(s.end / bs); pos++) {
      const id = s.blockIds[pos];
      if (id !== undefined) blocks.set(pos, id);
    }
    return blocks;
  }

  /** WRITE: a request of this step still waits for a consumer rank's registration (where its blocks go). */
  get awaitingRegistration(): boolean {
    if (this.#ctx.cfg.readMode) return false;
    for (const s of this.#step) {
      const t = this.#byTransfer.get(s.transferId);
      if (t && !t.finished && this.#awaits(t)) return true;
    }
    return false;
  }

  #awaits(t: Outgoing): boolean {
    return t.expectedRegistrations === null || t.registrations.length < t.expectedRegistrations;
  }

  /**
   * After the forward pass: pushes the layers not pushed yet; requests whose last prompt token
   * was computed are complete. Resolves when their pushes have settled, or after SAVE_WAIT_MS:
   * awaiting them here sends write_done as soon as the last one lands instead of after the rest
   * of the step (a push that takes longer is not waited for; write_done then follows it).
   */
  async endStep(): Promise<void> {
    this.pushPending();
    const ending: Outgoing[] = [];
    for (const s of this.#step) {
      // READ: the blocks hold this step's KV now. A grant is a lease on blocks that no longer
      // change (the agent records their checksums when it grants them), so it is made here,
      // after the forward pass, not before it.
      if (this.#ctx.cfg.readMode) this.#ctx.agent.grantRead(s.transferId, { blockIds: s.blockIds });
      const t = this.#byTransfer.get(s.transferId);
      if (t && s.last) {
        t.prefillDone = true;
        this.#maybeFinish(t);
        if (!t.finished) ending.push(t);
      }
    }
    this.#step = [];
    if (ending.length === 0 || this.#ctx.cfg.readMode) return;
    // A registration that arrived during the forward pass is read when the loop turns; it
    // pushes every layer computed so far (registration below), and is then waited for too.
    if (ending.some((t) => this.#awaits(t))) await new Promise<void>((resolve) => setImmediate(resolve));
    const pending = ending.flatMap((t) => [...t.writes]);
    if (pending.length === 0) return;
    await new Promise<void>((resolve) => {
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
    this.#write(t, reg, t.computed);
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

  /** One WRITE of these layers' blocks (region → position → local id) into the rank's blocks. */
  #write(t: Outgoing, reg: Registration, layers: ReadonlyMap<number, ReadonlyMap<number, number>>): boolean {
    if (!reg.agent || reg.failed) return false;
    const remoteByPos = new Map<number, number>();
    reg.msg.block_positions.forEach((pos, i) => {
      const id = reg.msg.block_notify_list[i];
      if (id !== undefined) remoteByPos.set(pos, id);
    });
    const pairs: {
      localRegion: number;
      localBlockIds: number[];
      remoteRegion: number;
      remoteBlockIds: number[];
    }[] = [];
    for (const [region, blocks] of layers) {
      const local: number[] = [];
      const remote: number[] = [];
      for (const [pos, id] of blocks) {
        const r = remoteByPos.get(pos);
        if (r === undefined) continue;
        local.push(id);
        remote.push(r);
      }
      if (local.length > 0)
        pairs.push({
          localRegion: region,
          localBlockIds: local,
          remoteRegion: region,
          remoteBlockIds: remote,
        });
    }
    if (pairs.length === 0) return false;
    if (!t.pushed) {
      t.pushed = true;
      emitMoRIIOEvent('first_layer_written', t.transferId);
    }
    const { agent, stats } = this.#ctx;
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
