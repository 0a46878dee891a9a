/**
 * Worker side of the NIXL connectors: owns this rank's transfer agent (its KV tensors are
 * the registered regions), publishes the handshake payload, and each step starts READs
 * (pull consumer), hands finished requests to the lease table (producer), drains the
 * agent's notifications and reports finished sends/receives and invalid blocks.
 */
import { isMainThread, workerData } from 'node:worker_threads';
import { totalKvHeads } from '../../config/model-info.ts';
import type { EngineConfig } from '../../config/types.ts';
import { countBlocks } from '../../connector/block-lists.ts';
import type { KVConnectorStatsData } from '../../connector/types.ts';
import type { KVCacheConfig, PagedKVMemory } from '../../kv/interfaces.ts';
import { getLogger } from '../../logging/logger.ts';
import {
  type BlockListPair,
  copyThreadsUpTo,
  createTransferAgent,
  isRetryableRefusal,
  type TransferAgent,
  type TransferHandle,
} from '../../transfer/index.ts';
import { RemoteEngines } from './handshake.ts';
import { HeteroTpReader } from './hetero-reader.ts';
import {
  compatibilityFactors,
  computeCompatibilityHash,
  NIXL_CONNECTOR_VERSION,
  type NixlHandshakePayload,
  type TransferMode,
} from './metadata.ts';
import { effectiveGrantWaitMs, type NixlOptions } from './options.ts';
import { ProducerLeases } from './producer-leases.ts';
import { PushConsumer, PushProducer } from './push-worker.ts';
import { isEmptyNixlStats, statsFromTransfer } from './stats.ts';
import {
  HEARTBEAT_PREFIX,
  type HeartbeatJob,
  heartbeatMessages,
  type NixlStepMetadata,
  PUSH_NACK_PREFIX,
  PUSH_REGISTRATION_PREFIX,
  parseCompletion,
  type RecvJob,
  type RemoteEndpoint,
} from './step-metadata.ts';
import { nixlTestHooks } from './test-hooks.ts';
import { handshakeTargetRanks } from './tp-mapping.ts';

const log = getLogger('nixl.worker');

interface Load {
  readonly job: RecvJob;
  handle: TransferHandle | null;
  settled: boolean;
  /** performance.now() of the first READ; retries stop a lease duration after it. */
  firstPostAt: number;
  retries: number;
  retryTimer: NodeJS.Timeout | null;
  /** The handshake was redone once after the connection to P failed. */
  reconnected: boolean;
}

/** Backoff before re-posting a READ that P refused because its grant did not exist yet. */
const RETRY_BASE_MS = 50;
const RETRY_MAX_MS = 1000;

/** Everything the pull and push parts share. */
export interface WorkerContext {
  readonly agent: TransferAgent;
  readonly engines: RemoteEngines;
  readonly tpRank: number;
  readonly tpSize: number;
  readonly opts: NixlOptions;
  readonly leases: ProducerLeases;
  regionPairs(localIds: readonly number[], remoteIds: readonly number[]): BlockListPair[];
  connect(remote: RemoteEndpoint): Promise<string>;
  /** Drops the cached handshake with `remote` (the rank connect() uses). */
  forget(remote: RemoteEndpoint): void;
  recvDone(reqId: string, invalidBlockIds: readonly number[]): void;
}

/** The tensor-parallel rank of this thread (worker threads get it in workerData). */
function currentTpRank(): number {
  if (isMainThread) return 0;
  const rank = (workerData as { tpRank?: unknown } | null)?.tpRank;
  return typeof rank === 'number' ? rank : 0;
}

export class NixlWorker {
  readonly mode: TransferMode;
  readonly #engineConfig: EngineConfig;
  readonly #kvCacheConfig: KVCacheConfig;
  readonly #opts: NixlOptions;
  readonly tpRank = currentTpRank();
  #ctx: WorkerContext | null = null;
  #payload: NixlHandshakePayload | null = null;
  #pushProducer: PushProducer | null = null;
  #pushConsumer: PushConsumer | null = null;
  /** Pull loads from a producer with another tensor-parallel size (staged, head-sliced). */
  #hetero: HeteroTpReader | null = null;
  readonly #loads = new Map<string, Load>();
  #recving: string[] = [];
  readonly #invalid = new Set<number>();
  #lastEviction = Date.now();

  constructor(
    engineConfig: EngineConfig,
    kvCacheConfig: KVCacheConfig,
    mode: TransferMode,
    opts: NixlOptions,
  ) {
    this.#engineConfig = engineConfig;
    this.#kvCacheConfig = kvCacheConfig;
    this.mode = mode;
    this.#opts = opts;
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
    const opts = this.#opts;
    const engineId = this.#engineConfig.kvTransferConfig?.engine_id ?? 'engine';
    const hash = computeCompatibilityHash(
      compatibilityFactors(this.#engineConfig, this.#kvCacheConfig, this.mode),
    );
    const hooks = nixlTestHooks();
    const emulation = this.#engineConfig.emulation;
    const agentOptions = {
      engineId,
      tpRank: this.tpRank,
      compatHash: hash,
      host: opts.sideChannelHost,
      port: 0,
      backends: opts.backends,
      ...(opts.authSecret ? { secret: opts.authSecret } : {}),
      transferTimeoutMs: opts.transferTimeout * 1000,
      grantWaitMs: effectiveGrantWaitMs(opts),
      connectTimeoutMs: opts.handshakeTimeout * 1000,
      // vLLM's num_threads (UCX progress threads): here the threads a large same-host copy may use.
      copyThreads: copyThreadsUpTo(opts.numThreads),
      ...(opts.busyPollUs === undefined ? {} : { busyPollUs: opts.busyPollUs }),
      // Emulated deployments (serve --kv-link): completions held as the target's link would.
      emulatedLink: emulation?.kvLink ? { ...emulation.kvLink, speedup: emulation.speedup } : null,
    };
    // Test hooks are functions and cannot cross into the agent thread: with them, the agent stays here.
    const agent = await createTransferAgent({
      ...agentOptions,
      thread: opts.transferThread && hooks === undefined,
      ...(hooks ? { testHooks: hooks } : {}),
    });
    agent.registerMemory(
      memory.tensors.map((t) => ({
        id: t.index,
        bytes: t.bytes,
        blockBytes: t.blockBytes,
        numBlocks: t.numBlocks,
      })),
    );
    this.#payload = {
      compatibility_hash: hash,
      connector_version: NIXL_CONNECTOR_VERSION,
      agent_metadata: {
        engine_id: engineId,
        tp_rank: this.tpRank,
        tp_size: this.tpSize,
        block_size: this.#kvCacheConfig.groups[0]?.spec.blockSize ?? 16,
        num_blocks: memory.numBlocks,
        block_lens: memory.tensors.map((t) => t.blockBytes),
        kv_cache_layout: 'NHD',
        agent: agent.metadata(),
      },
    };
    const kvHeads = totalKvHeads(this.#engineConfig.model.model);
    const engines = new RemoteEngines(agent, {
      localPayload: this.#payload,
      enforceCompat: opts.enforceHandshakeCompat,
      timeoutMs: opts.handshakeTimeout * 1000,
      secret: opts.authSecret,
      mode: this.mode,
      totalKvHeads: kvHeads,
    });
    const regionIds = memory.tensors.map((t) => t.index);
    const ctx: WorkerContext = {
      agent,
      engines,
      tpRank: this.tpRank,
      tpSize: this.tpSize,
      opts,
      leases: new ProducerLeases(agent, opts.kvLeaseDuration, this.tpSize),
      regionPairs: (localIds, remoteIds) =>
        regionIds.map((r) => ({
          localRegion: r,
          localBlockIds: localIds,
          remoteRegion: r,
          remoteBlockIds: remoteIds,
        })),
      connect: (remote) => {
        const [rank = 0] = handshakeTargetRanks(this.tpSize, this.tpRank, remote.tpSize);
        return engines.connect(remote, rank);
      },
      forget: (remote) => {
        const [rank = 0] = handshakeTargetRanks(this.tpSize, this.tpRank, remote.tpSize);
        engines.forget(remote, rank);
      },
      recvDone: (reqId, invalid) => {
        for (const id of invalid) this.#invalid.add(id);
        this.#recving.push(reqId);
      },
    };
    this.#ctx = ctx;
    if (this.mode === 'pull') {
      this.#hetero = new HeteroTpReader({
        agent,
        engines,
        memory,
        kvCacheConfig: this.#kvCacheConfig,
        tpRank: this.tpRank,
        tpSize: this.tpSize,
        totalKvHeads: kvHeads,
        maxModelLen: this.#engineConfig.model.maxModelLen,
        leaseSeconds: opts.kvLeaseDuration,
        recvDone: ctx.recvDone,
      });
    }
    if (this.mode === 'push') {
      this.#pushProducer = new PushProducer(ctx);
      this.#pushConsumer = new PushConsumer(ctx);
    }
  }

  getHandshakeMetadata(): NixlHandshakePayload | null {
    return this.#payload;
  }

  startLoadKv(meta: NixlStepMetadata): void {
    const ctx = this.#ctx;
    if (!ctx) return;
    for (const job of meta.reqsToSend ?? []) {
      ctx.leases.add(job);
      this.#pushProducer?.finished(job);
    }
    for (const job of meta.reqsToRecv ?? []) this.#startRead(ctx, job);
    for (const job of meta.reqsToRegister ?? []) this.#pushConsumer?.register(job);
    for (const hb of meta.heartbeats ?? []) this.#sendHeartbeat(ctx, hb);
    this.#drainNotifications(ctx);
    if (Date.now() - this.#lastEviction > 60_000) {
      this.#lastEviction = Date.now();
      ctx.engines.evictIdle(this.#opts.engineTtl);
    }
  }

  #startRead(ctx: WorkerContext, job: RecvJob): void {
    if (this.#hetero && job.remote.tpSize !== this.tpSize) {
      this.#hetero.start(job, `${job.remoteRequestId}:${this.tpSize}`);
      return;
    }
    const release = countBlocks(job.localBlockIds) === 0;
    const load: Load = {
      job,
      handle: null,
      settled: false,
      firstPostAt: 0,
      retries: 0,
      retryTimer: null,
      reconnected: false,
    };
    if (!release) this.#loads.set(job.reqId, load);
    const notification = `${job.remoteRequestId}:${this.tpSize}`;
    const run = async (): Promise<void> => {
      const agentName = await ctx.connect(job.remote);
      if (release) {
        await ctx.agent.sendNotification(agentName, notification);
        return;
      }
      load.firstPostAt = performance.now();
      this.#postRead(ctx, load, agentName);
    };
    run().catch((e: unknown) => {
      const kind = load.handle === null && !release ? 'handshake_failed' : 'notification_failed';
      log.error(
        'NIXL transfer failure: %s | Context: %s',
        kind,
        `request ${job.reqId} from ${job.remote.engineId}: ${String((e as Error)?.message ?? e)}`,
      );
      if (!release) this.#failLoad(load, job.localBlockIds.flat());
    });
  }

  #postRead(ctx: WorkerContext, load: Load, agentName: string): void {
    const job = load.job;
    load.handle = ctx.agent.read(
      agentName,
      ctx.regionPairs(job.localBlockIds.flat(), job.remoteBlockIds.flat()),
      { notification: `${job.remoteRequestId}:${this.tpSize}`, grantKey: job.remoteRequestId },
    );
  }

  /**
   * P refused the READ only because its grant did not exist yet (P's worker creates it one
   * engine step after P answered): post it again after a backoff, while P's lease could
   * still be running. A grant that was revoked or expired is never retried.
   */
  #retryLater(ctx: WorkerContext, load: Load, agentName: string, reason: string | undefined): boolean {
    if (!isRetryableRefusal(reason)) return false;
    const delay = Math.min(RETRY_BASE_MS * 2 ** load.retries, RETRY_MAX_MS);
    const budgetMs = this.#opts.kvLeaseDuration * 1000;
    if (performance.now() + delay - load.firstPostAt > budgetMs) return false;
    load.retries++;
    load.handle = null;
    log.warn(
      'NIXL READ for request %s refused (%s); retrying in %d ms (attempt %d)',
      load.job.reqId,
      reason ?? '',
      delay,
      load.retries + 1,
    );
    load.retryTimer = setTimeout(() => {
      load.retryTimer = null;
      if (load.settled) return;
      try {
        this.#postRead(ctx, load, agentName);
      } catch (e) {
        log.error(
          'NIXL transfer failure: transfer_failed | Context: request %s: %s',
          load.job.reqId,
          String((e as Error)?.message ?? e),
        );
        this.#failLoad(load, load.job.localBlockIds.flat());
      }
    }, delay);
    return true;
  }

  /**
   * The connection to P failed (refused or lost): P may have restarted under the same
   * engine id with its agent elsewhere, so the cached handshake is dropped and the READ is
   * posted once more after a fresh handshake. A second failure is a load error.
   */
  #reconnect(ctx: WorkerContext, load: Load, reason: string | undefined): boolean {
    if (load.reconnected || !reason?.startsWith('connection to ')) return false;
    load.reconnected = true;
    load.handle = null;
    ctx.forget(load.job.remote);
    log.warn(
      'NIXL READ for request %s failed (%s); handshaking with %s again',
      load.job.reqId,
      reason,
      load.job.remote.engineId,
    );
    ctx
      .connect(load.job.remote)
      .then((agentName) => {
        if (!load.settled) this.#postRead(ctx, load, agentName);
      })
      .catch((e: unknown) => {
        log.error(
          'NIXL transfer failure: handshake_failed | Context: request %s from %s: %s',
          load.job.reqId,
          load.job.remote.engineId,
          String((e as Error)?.message ?? e),
        );
        this.#failLoad(load, load.job.localBlockIds.flat());
      });
    return true;
  }

  #failLoad(load: Load, invalid: readonly number[]): void {
    if (load.settled) return;
    load.settled = true;
    if (load.retryTimer) clearTimeout(load.retryTimer);
    load.retryTimer = null;
    this.#loads.delete(load.job.reqId);
    this.#ctx?.recvDone(load.job.reqId, invalid);
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
      const m = n.message;
      if (m.startsWith(HEARTBEAT_PREFIX)) {
        ctx.leases.heartbeat(m.slice(HEARTBEAT_PREFIX.length).split(',').filter(Boolean));
      } else if (m.startsWith(PUSH_REGISTRATION_PREFIX)) {
        this.#pushProducer?.registration(m.slice(PUSH_REGISTRATION_PREFIX.length));
      } else if (m.startsWith(PUSH_NACK_PREFIX)) {
        this.#pushConsumer?.nack(m.slice(PUSH_NACK_PREFIX.length));
      } else {
        const c = parseCompletion(m);
        if (!c) log.warn('NIXL worker got an unknown notification from %s: %s', n.agent, m.slice(0, 80));
        else if (!this.#pushConsumer?.completion(c.reqId, c.count)) ctx.leases.completion(c.reqId, c.count);
      }
    }
  }

  getFinished(): { sending: string[] | null; recving: string[] | null } {
    const ctx = this.#ctx;
    if (!ctx) return { sending: null, recving: null };
    this.#drainNotifications(ctx);
    for (const load of [...this.#loads.values()]) {
      if (!load.handle) continue;
      const status = ctx.agent.status(load.handle);
      if (status.state === 'PROC') continue;
      const handle = load.handle;
      ctx.agent.releaseHandle(handle);
      if (status.state === 'DONE') {
        load.settled = true;
        this.#loads.delete(load.job.reqId);
        this.#recving.push(load.job.reqId);
      } else if (
        !this.#retryLater(ctx, load, handle.remoteAgent, status.reason) &&
        !this.#reconnect(ctx, load, status.reason)
      ) {
        log.error(
          'NIXL transfer failure: transfer_failed | Context: request %s: %s',
          load.job.reqId,
          status.reason ?? '',
        );
        const failed =
          status.failedBlockIds.length > 0 ? status.failedBlockIds : load.job.localBlockIds.flat();
        this.#failLoad(load, failed);
        // D will not read again (the policy recomputes or fails): let P free its blocks now.
        const note = `${load.job.remoteRequestId}:${this.tpSize}`;
        ctx.agent.sendNotification(handle.remoteAgent, note).catch(() => {});
      }
    }
    this.#hetero?.poll((job) => `${job.remoteRequestId}:${this.tpSize}`);
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
    const data = statsFromTransfer(ctx.agent.resetStats(), ctx.leases.takeExpiredCount());
    return isEmptyNixlStats(data) ? null : { ...data };
  }

  /** True while this worker still has loads or pushes in flight. */
  get busy(): boolean {
    return (
      this.#loads.size > 0 ||
      (this.#hetero?.busy ?? false) ||
      (this.#pushProducer?.busy ?? false) ||
      (this.#pushConsumer?.busy ?? false)
    );
  }

  async shutdown(): Promise<void> {
    for (const load of this.#loads.values()) if (load.retryTimer) clearTimeout(load.retryTimer);
    this.#hetero?.shutdown();
    await this.#ctx?.agent.close();
  }
}
