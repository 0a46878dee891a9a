/**
 * Worker side of the NIXL connectors: one per tensor-parallel rank. When the KV caches are
 * registered it opens the rank's transfer agent (worker-context.ts); each step it hands
 * finished requests to the producer's leases, starts loads (pull-reader.ts, or
 * hetero-reader.ts for a producer of another tensor-parallel size) or push registrations
 * (push-worker.ts), sends heartbeats, routes the notifications peers sent
 * (notifications.ts), and reports finished sends and receives and invalid blocks.
 */
import type { EngineConfig } from '../../config/types.ts';
import { workerTpRank } from '../../connector/tp-rank.ts';
import type { KVConnectorStatsData } from '../../connector/types.ts';
import type { KVCacheConfig, PagedKVMemory } from '../../kv/interfaces.ts';
import { getLogger } from '../../logging/logger.ts';
import { type AgentFactory, linkStatsData, type TransferAgent, takeLinkStats } from '../../transfer/index.ts';
import type { NixlOptions } from './config.ts';
import type { NixlHandshakePayload, TransferMode } from './handshake.ts';
import { HeteroTpReader } from './hetero-reader.ts';
import { completionNotification, heartbeatMessages, routeNotification } from './notifications.ts';
import { PullReader } from './pull-reader.ts';
import { PushConsumer, PushProducer } from './push-worker.ts';
import { isEmptyNixlStats, statsFromTransfer } from './stats.ts';
import type { HeartbeatJob, NixlStepMetadata, RecvJob } from './step-metadata.ts';
import { handshakeTargetRanks } from './tp-mapping.ts';
import { openWorkerContext, type WorkerContext } from './worker-context.ts';

const log = getLogger('kvconnect.connectors.nixl.worker');

/** How often idle remote engines are looked for (engine_ttl). */
const EVICTION_INTERVAL_MS = 60_000;

export class NixlWorker {
  readonly mode: TransferMode;
  readonly #engineConfig: EngineConfig;
  readonly #kvCacheConfig: KVCacheConfig;
  readonly #opts: NixlOptions;
  readonly #createAgent: AgentFactory;
  readonly tpRank = workerTpRank();
  #ctx: WorkerContext | null = null;
  #pull: PullReader | null = null;
  /** Pull loads from a producer with another tensor-parallel size (staged, head-sliced). */
  #hetero: HeteroTpReader | null = null;
  #pushProducer: PushProducer | null = null;
  #pushConsumer: PushConsumer | null = null;
  #recving: string[] = [];
  readonly #invalid = new Set<number>();
  #lastEviction = Date.now();
  /** Ends the engine's idle wait (KVConnectorBase.wakeEngine). */
  readonly #wake: () => void;

  constructor(
    engineConfig: EngineConfig,
    kvCacheConfig: KVCacheConfig,
    mode: TransferMode,
    opts: NixlOptions,
    createAgent: AgentFactory,
    wake: () => void = () => {},
  ) {
    this.#wake = wake;
    this.#engineConfig = engineConfig;
    this.#kvCacheConfig = kvCacheConfig;
    this.mode = mode;
    this.#opts = opts;
    this.#createAgent = createAgent;
  }

  get tpSize(): number {
    return this.#engineConfig.parallel.tensorParallelSize;
  }

  get agent(): TransferAgent | null {
    return this.#ctx?.agent ?? null;
  }

  /** The agent's regions that hold this rank's KV tensors (write tracking records only these). */
  kvRegionIds: readonly number[] = [];

  async registerKvCaches(memory: PagedKVMemory): Promise<void> {
    this.kvRegionIds = memory.tensors.map((t) => t.index);
    const ctx = await openWorkerContext({
      engineConfig: this.#engineConfig,
      kvCacheConfig: this.#kvCacheConfig,
      mode: this.mode,
      opts: this.#opts,
      tpRank: this.tpRank,
      memory,
      createAgent: this.#createAgent,
      // A load that ends outside a step (a failed handshake, a declined READ) is reported at once.
      recvDone: (reqId, invalid) => {
        for (const id of invalid) this.#invalid.add(id);
        this.#recving.push(reqId);
        this.#wake();
      },
      wake: this.#wake,
    });
    this.#ctx = ctx;
    // A peer's notification (a completed push, a READ done on our blocks) is reported by the next step.
    ctx.agent.onNotification(this.#wake);
    if (this.mode === 'pull') {
      const hetero = new HeteroTpReader({
        agent: ctx.agent,
        engines: ctx.engines,
        memory,
        kvCacheConfig: this.#kvCacheConfig,
        tpRank: this.tpRank,
        tpSize: this.tpSize,
        totalKvHeads: ctx.totalKvHeads,
        maxModelLen: this.#engineConfig.model.maxModelLen,
        leaseSeconds: this.#opts.kvLeaseDuration,
        expiredReads: ctx.expiredReads,
        recvDone: ctx.recvDone,
        wakeWhenSettled: ctx.wakeWhenSettled,
      });
      this.#hetero = hetero;
      // A producer with smaller blocks is found at the handshake: its loads are staged too.
      this.#pull = new PullReader(ctx, (job) => hetero.start(job, this.#notification(job)));
    }
    if (this.mode === 'push') {
      this.#pushProducer = new PushProducer(ctx);
      this.#pushConsumer = new PushConsumer(ctx);
    }
  }

  getHandshakeMetadata(): NixlHandshakePayload | null {
    return this.#ctx?.payload ?? null;
  }

  startLoadKv(meta: NixlStepMetadata): void {
    const ctx = this.#ctx;
    if (!ctx) return;
    for (const job of meta.reqsToSend ?? []) {
      ctx.leases.add(job);
      this.#pushProducer?.finished(job);
    }
    for (const job of meta.reqsToRecv ?? []) this.#startRead(job);
    for (const job of meta.reqsToRegister ?? []) this.#pushConsumer?.register(job);
    for (const hb of meta.heartbeats ?? []) this.#sendHeartbeat(ctx, hb);
    this.#drainNotifications(ctx);
    if (Date.now() - this.#lastEviction > EVICTION_INTERVAL_MS) {
      this.#lastEviction = Date.now();
      ctx.engines.evictIdle(this.#opts.engineTtl);
    }
  }

  /**
   * Starts a load: from a producer of another tensor-parallel size staged and head-sliced
   * (hetero-reader.ts), else read straight into the local blocks (pull-reader.ts). Each reader
   * handshakes, declines a READ of blocks about to expire (./expired-reads.ts) and reports a
   * failed handshake as the load's failure.
   */
  #startRead(job: RecvJob): void {
    if (this.#hetero && job.remote.tpSize !== this.tpSize) this.#hetero.start(job, this.#notification(job));
    else this.#pull?.start(job);
  }

  #notification(job: RecvJob): string {
    return completionNotification(job.remoteRequestId, this.tpSize);
  }

  #sendHeartbeat(ctx: WorkerContext, hb: HeartbeatJob): void {
    const send = async (): Promise<void> => {
      // Every producer rank mapped to this rank holds the blocks under its own lease.
      for (const rank of handshakeTargetRanks(this.tpSize, this.tpRank, hb.remote.tpSize)) {
        const name = await ctx.engines.connect(hb.remote, rank);
        for (const message of heartbeatMessages(hb.remoteRequestIds))
          await ctx.agent.sendNotification(name, message);
      }
    };
    send().catch((e: unknown) => log.warn('NIXL heartbeat to %s failed: %s', hb.remote.engineId, String(e)));
  }

  #drainNotifications(ctx: WorkerContext): void {
    for (const n of ctx.agent.drainNotifications()) {
      routeNotification(n, {
        heartbeat: (reqIds) => ctx.leases.heartbeat(reqIds),
        registration: (json) => this.#pushProducer?.registration(json),
        nack: (reqId, blockIds) => this.#pushConsumer?.nack(reqId, blockIds),
        completion: (reqId, worldSize) => {
          if (!this.#pushConsumer?.completion(reqId, worldSize)) ctx.leases.completion(reqId, worldSize);
        },
        unknown: ({ agent, message }) =>
          log.warn('NIXL worker got an unknown notification from %s: %s', agent, message.slice(0, 80)),
      });
    }
  }

  getFinished(): { sending: string[] | null; recving: string[] | null } {
    const ctx = this.#ctx;
    if (!ctx) return { sending: null, recving: null };
    this.#drainNotifications(ctx);
    this.#pull?.poll();
    this.#hetero?.poll((job) => this.#notification(job));
    this.#pushProducer?.poll();
    this.#pushConsumer?.poll();
    ctx.leases.expire();
    const sending = ctx.leases.takeDone();
    const recving = this.#recving;
    this.#recving = [];
    return { sending: sending.length > 0 ? sending : null, recving: recving.length > 0 ? recving : null };
  }

  getBlockIdsWithLoadErrors(): number[] {
    const ids = [...this.#invalid];
    this.#invalid.clear();
    return ids;
  }

  getStats(): KVConnectorStatsData | null {
    const ctx = this.#ctx;
    if (!ctx) return null;
    const data = statsFromTransfer(ctx.agent.resetStats(), {
      expired: ctx.leases.takeExpiredCount() + ctx.expiredReads.takeCount(),
      afterExpiry: ctx.leases.takeAfterExpiryCount(),
      failedHandshakes: ctx.engines.takeFailedHandshakes(),
    });
    // Emulated deployments (--kv-link): the link's counts travel with the step's stats.
    const link = linkStatsData(takeLinkStats(ctx.agent));
    if (link) return { ...data, kv_link: link };
    return isEmptyNixlStats(data) ? null : { ...data };
  }

  /** True while this worker still has loads or pushes in flight. */
  get busy(): boolean {
    return (
      (this.#pull?.busy ?? false) ||
      (this.#hetero?.busy ?? false) ||
      (this.#pushProducer?.busy ?? false) ||
      (this.#pushConsumer?.busy ?? false)
    );
  }

  async shutdown(): Promise<void> {
    this.#pull?.shutdown();
    this.#hetero?.shutdown();
    await this.#ctx?.agent.close();
  }
}
