/**
 * Worker side of MoRIIOConnector: one per tensor-parallel rank. Owns this rank's transfer
 * agent (xgmi → the shm transport, rdma → tcp), its handshake listener and its notify
 * listener, both at base + dp_local * tp_size + tp_rank, and routes each step's jobs to
 * the producer and consumer halves.
 */
import { totalKvHeads as modelTotalKvHeads } from '../../config/model-info.ts';
import type { EngineConfig } from '../../config/types.ts';
import { kvRegions } from '../../connector/kv-regions.ts';
import { workerTpRank } from '../../connector/tp-rank.ts';
import type { KVCacheConfig, PagedKVMemory } from '../../kv/interfaces.ts';
import { getLogger } from '../../logging/logger.ts';
import {
  type AgentFactory,
  copyThreadsUpTo,
  fetchRemoteMetadata,
  SideChannelServer,
  type TransferAgent,
} from '../../transfer/index.ts';
import { type MoRIIOConfig, moriioPort } from './config.ts';
import { MoRIIOConsumer } from './consumer.ts';
import { checkPeerPayload, type MoRIIOAgentPayload } from './handshake.ts';
import { type NotifyMessage, NotifyServer } from './notify-channel.ts';
import { MoRIIOProducer } from './producer.ts';
import { isEmptyMoRIIOStats, type MoRIIOStatsData, MoRIIOStatsRecorder } from './stats.ts';
import type { MoRIIOStepMetadata } from './step-metadata.ts';
import type { MoRIIOWorkerContext } from './worker-context.ts';

const log = getLogger('kvconnect.connectors.moriio.worker');
const WARMUP = 'moriio-link-up';

export class MoRIIOWorker {
  /** Ends the engine's idle wait (KVConnectorBase.wakeEngine). */
  readonly #wake: () => void;
  readonly #cfg: MoRIIOConfig;
  readonly #engineConfig: EngineConfig;
  readonly #kvCacheConfig: KVCacheConfig;
  readonly #createAgent: AgentFactory;
  readonly tpRank = workerTpRank();
  #agent: TransferAgent | null = null;
  #handshake: SideChannelServer | null = null;
  #notify: NotifyServer | null = null;
  #memory: PagedKVMemory | null = null;
  #payload: MoRIIOAgentPayload | null = null;
  #producer: MoRIIOProducer | null = null;
  #consumer: MoRIIOConsumer | null = null;
  readonly #peers = new Map<string, Promise<string>>();
  readonly #stats = new MoRIIOStatsRecorder();

  constructor(
    cfg: MoRIIOConfig,
    engineConfig: EngineConfig,
    kvCacheConfig: KVCacheConfig,
    createAgent: AgentFactory,
    wake: () => void = () => {},
  ) {
    this.#wake = wake;
    this.#cfg = cfg;
    this.#engineConfig = engineConfig;
    this.#kvCacheConfig = kvCacheConfig;
    this.#createAgent = createAgent;
  }

  get tpSize(): number {
    return this.#engineConfig.parallel.tensorParallelSize;
  }

  get agent(): TransferAgent | null {
    return this.#agent;
  }

  /** True while transfers of this rank are in flight. */
  get busy(): boolean {
    return (this.#producer?.busy ?? false) || (this.#consumer?.busy ?? false);
  }

  /** The agent's regions that hold this rank's KV tensors (write tracking records only these). */
  kvRegionIds: readonly number[] = [];

  /** WRITE mode: the producer records each layer's full blocks as it pushes them (producer.ts). */
  get recordsPerLayer(): boolean {
    return !this.#cfg.readMode;
  }

  async registerKvCaches(memory: PagedKVMemory): Promise<void> {
    this.kvRegionIds = memory.tensors.map((t) => t.index);
    const cfg = this.#cfg;
    this.#memory = memory;
    const agent = await this.#createAgent({
      engineId: cfg.engineId,
      tpRank: this.tpRank,
      host: cfg.hostIp,
      backends: cfg.backend === 'xgmi' ? ['SHM'] : ['TCP'],
      transferTimeoutMs: cfg.transferTimeoutS * 1000,
      // The peer's event loop may be busy with a long prefill while the link comes up.
      connectTimeoutMs: Math.max(5000, cfg.transferTimeoutS * 1000),
      // Layer WRITEs posted from saveKvLayer then move while this engine computes the next layers.
      thread: cfg.transferThread,
      // num_workers (MoRI's transfer worker threads): the threads a large same-host copy may use.
      copyThreads: copyThreadsUpTo(cfg.numWorkers),
      ...(cfg.busyPollUs === undefined ? {} : { busyPollUs: cfg.busyPollUs }),
    });
    this.#agent = agent;
    agent.registerMemory(kvRegions(memory));
    const blockSize = this.#kvCacheConfig.groups[0]?.spec.blockSize ?? 16;
    const totalKvHeads = modelTotalKvHeads(this.#engineConfig.model.model);
    this.#payload = {
      engine_id: cfg.engineId,
      tp_rank: this.tpRank,
      tp_size: this.tpSize,
      total_kv_heads: totalKvHeads,
      block_size: blockSize,
      block_lens: memory.tensors.map((t) => t.blockBytes),
      agent: agent.metadata(),
    };
    const handshakePort = moriioPort(cfg.handshakePort, cfg.dpRankLocal, this.tpSize, this.tpRank);
    const notifyPort = moriioPort(cfg.notifyPort, cfg.dpRankLocal, this.tpSize, this.tpRank);
    const payload = this.#payload;
    this.#handshake = new SideChannelServer({
      host: cfg.hostIp,
      port: handshakePort,
      getMetadata: (rank) => (rank === this.tpRank ? payload : undefined),
      portHint: `Each worker listens on handshake_port + dp_local * tp_size + tp_rank (${handshakePort} here); give every engine on this host its own handshake_port range.`,
    });
    try {
      await this.#handshake.start();
      this.#notify = new NotifyServer((m) => this.#onMessage(m));
      await this.#notify.listen(cfg.hostIp, notifyPort, 'notify_port');
    } catch (e) {
      await this.shutdown();
      throw e;
    }
    const ctx: MoRIIOWorkerContext = {
      agent,
      cfg,
      tpRank: this.tpRank,
      tpSize: this.tpSize,
      totalKvHeads,
      blockSize,
      regions: memory.tensors.map((t) => t.index),
      blockBytes: new Map(memory.tensors.map((t) => [t.index, t.blockBytes])),
      handshakePort,
      notifyPort,
      stats: this.#stats,
      connect: (host, port, rank, remoteTp) => this.#connect(host, port, rank, remoteTp),
    };
    this.#producer = new MoRIIOProducer(ctx);
    this.#consumer = new MoRIIOConsumer(ctx);
    log.debug(
      'MoRIIO worker %d: handshake %s:%d, notify %s:%d',
      this.tpRank,
      cfg.hostIp,
      handshakePort,
      cfg.hostIp,
      notifyPort,
    );
  }

  getHandshakeMetadata(): MoRIIOAgentPayload | null {
    return this.#payload;
  }

  #connect(host: string, port: number, rank: number, remoteTp: number): Promise<string> {
    const key = `${host}:${port}#${rank}`;
    let p = this.#peers.get(key);
    if (!p) {
      p = this.#handshakeWith(host, port, rank, remoteTp);
      this.#peers.set(key, p);
      p.catch(() => this.#peers.delete(key));
    }
    return p;
  }

  async #handshakeWith(host: string, port: number, rank: number, remoteTp: number): Promise<string> {
    const agent = this.#agent!;
    const local = this.#payload!;
    const { metadata } = await fetchRemoteMetadata(host, port, rank, { timeoutMs: 5000 });
    const remote = checkPeerPayload(metadata, local, this.#cfg.backend, { host, port });
    if (remote.tp_size !== remoteTp) {
      log.warn('MoRIIO peer %s:%d reports tp_size %d, expected %d', host, port, remote.tp_size, remoteTp);
    }
    const name = agent.addRemoteAgent(remote.agent);
    // Bring the data link up now, not at the first write in the middle of a prefill.
    await agent.sendNotification(name, WARMUP);
    return name;
  }

  #onMessage(m: NotifyMessage): void {
    if (m.type === 'remote_blocks') this.#producer?.registration(m);
    else if (m.type === 'release')
      this.#producer?.release(m.transfer_id, m.consumer_tp_size, m.abort === true);
    else this.#consumer?.writeDone(m.transfer_id);
    // A write landed or blocks were released: the next step reports it, so let it run now.
    this.#wake();
  }

  async startLoadKv(meta: MoRIIOStepMetadata): Promise<void> {
    const producer = this.#producer;
    const consumer = this.#consumer;
    if (!producer || !consumer) return;
    producer.beginStep(meta.saves ?? [], meta.sends ?? [], meta.dropped ?? []);
    consumer.failLoads(meta.failedLoads ?? []);
    for (const job of meta.writeRecvs ?? []) consumer.expectWrites(job);
    if ((meta.reads ?? []).length > 0) await consumer.startReads(meta.reads);
  }

  async waitForLayerLoad(layerName: string): Promise<void> {
    if (!this.#cfg.readMode || !this.#memory || !this.#consumer) return;
    await this.#consumer.waitForRegion(this.#memory.tensorIndexOfLayer(layerName));
  }

  async saveKvLayer(layerName: string): Promise<void> {
    const producer = this.#producer;
    if (!this.#memory || !producer) return;
    if (!producer.saveLayer(this.#memory.tensorIndexOfLayer(layerName))) return;
    // The layers not pushed yet are worth moving while the next layers compute. A consumer's
    // registration that arrived during the forward pass waits in a socket until the event loop
    // turns: let it turn once, so the push reaches that consumer rank too.
    if (producer.awaitingRegistration) await new Promise<void>((resolve) => setImmediate(resolve));
    const posted = producer.pushPending();
    // An agent on this loop moves the bytes only when the loop turns. A threaded agent's
    // thread has the WRITE already: a turn here would only delay the next layer.
    if (posted && !this.#cfg.transferThread) await new Promise<void>((resolve) => setImmediate(resolve));
  }

  async waitForSave(): Promise<void> {
    await this.#producer?.endStep();
    await this.#consumer?.finishReads();
  }

  getFinished(): { sending: string[] | null; recving: string[] | null } {
    // MoRIIO's control messages use the notify channel; agent notifications are link warm-ups.
    this.#agent?.drainNotifications();
    const sending = this.#producer?.takeDone() ?? [];
    const recving = this.#consumer?.takeRecving() ?? [];
    return { sending: sending.length > 0 ? sending : null, recving: recving.length > 0 ? recving : null };
  }

  getBlockIdsWithLoadErrors(): number[] {
    return this.#consumer?.takeInvalid() ?? [];
  }

  /** This rank's transfer stats since the last call (MoRIIOStatsData), or null when nothing happened. */
  getStats(): MoRIIOStatsData | null {
    const data = this.#stats.take(this.#agent?.resetStats() ?? null);
    return isEmptyMoRIIOStats(data) ? null : data;
  }

  async shutdown(): Promise<void> {
    this.#consumer?.shutdown();
    await this.#notify?.close();
    await this.#handshake?.close();
    await this.#agent?.close();
    this.#notify = null;
    this.#handshake = null;
    this.#agent = null;
  }
}
