/**
 * OffloadingConnector (docs/connectors/offloading.md): KV offload keyed by prefix block
 * hashes, per KV cache group (HMA). One instance per role; the scheduler half keeps the index
 * and decides, the worker half moves bytes. Stores happen after compute; CPU hits load
 * synchronously in startLoadKv, secondary-tier hits asynchronously (WAITING_FOR_REMOTE_KVS).
 */
import type { ExtraConfigSchema } from '../../config/extra-config.ts';
import type { EngineConfig, KVTransferConfigLike } from '../../config/types.ts';
import { KVConnectorBase } from '../../connector/base.ts';
import type { CachedTokensBySource } from '../../connector/cache-hit-source.ts';
import type { ConnectorMetricSpec } from '../../connector/metric-specs.ts';
import type {
  ConnectorRequest,
  ForwardContext,
  KVConnectorOutput,
  KVConnectorRole,
  KVConnectorStatsData,
  KVConnectorWorkerMetadata,
  MatchedTokens,
  RequestFinishedResult,
  SchedulerOutput,
} from '../../connector/types.ts';
import { noneHash } from '../../kv/block-hash.ts';
import type { KVCacheBlocks, KVCacheConfig, KVCacheEvent, PagedKVMemory } from '../../kv/interfaces.ts';
import { getLogger } from '../../logging/logger.ts';
import type { ConnectorAdvertisement } from '../../wire/index.ts';
import { OFFLOADING_EXTRA_CONFIG, type OffloadingConfig, parseOffloadingConfig } from './config.ts';
import { OffloadLayout } from './layout.ts';
import { offloadMetricSpecs } from './metrics.ts';
import { P2PTier } from './p2p-tier.ts';
import { OffloadScheduler } from './scheduler.ts';
import { OutOfTreeSpec } from './spec-module.ts';
import { type OffloadMetadata, WORKER_META_KEY } from './step-metadata.ts';
import { createSecondaryTiers } from './tier-factory.ts';
import { runLayoutFor } from './vllm-key-layout.ts';
import { OffloadWorker } from './worker.ts';

const log = getLogger('kvconnect.connectors.offloading.connector');

export class OffloadingConnector extends KVConnectorBase {
  static override supportsHMA = true;

  static override extraConfigSchema: ExtraConfigSchema = OFFLOADING_EXTRA_CONFIG;

  static override validateExtraConfig(
    extra: Record<string, unknown>,
    engineConfig: EngineConfig,
  ): OffloadingConfig {
    return parseOffloadingConfig(extra, engineConfig);
  }

  static override metricSpecs(config: KVTransferConfigLike): readonly ConnectorMetricSpec[] {
    return offloadMetricSpecs(config);
  }

  readonly offloadConfig: OffloadingConfig;
  readonly layout: OffloadLayout;
  readonly scheduler: OffloadScheduler | null = null;
  readonly worker: OffloadWorker | null = null;

  constructor(engineConfig: EngineConfig, role: KVConnectorRole, kvCacheConfig: KVCacheConfig) {
    super(engineConfig, role, kvCacheConfig);
    this.offloadConfig = parseOffloadingConfig(this.kvTransferConfig.kv_connector_extra_config, engineConfig);
    this.layout = new OffloadLayout(engineConfig, kvCacheConfig, this.offloadConfig);
    const run = runLayoutFor(engineConfig, kvCacheConfig, this.offloadConfig.blocksPerChunk);
    const spec = this.offloadConfig.specClass
      ? new OutOfTreeSpec(
          this.offloadConfig.specName,
          this.offloadConfig.specClass,
          this.kvTransferConfig.kv_connector_extra_config,
          run,
        )
      : null;
    const specTiers = spec?.tiers() ?? [];
    const p2p = {
      dataParallelRank: engineConfig.parallel.dataParallelRank,
      slotBytes: this.layout.slotBytes,
      numSlots: this.layout.numSlots,
      hashSeed: Buffer.from(noneHash(engineConfig.cache.prefixCachingHashAlgo)).toString('hex'),
    };
    const tiers = [...specTiers, ...createSecondaryTiers(this.offloadConfig.secondaryTiers, { run, p2p })];
    const p2pTier = tiers.findIndex((t) => t instanceof P2PTier);
    const tierInfo = [
      ...specTiers.map((t) => ({ medium: t.medium, locality: null, enableKvEvents: false })),
      ...this.offloadConfig.secondaryTiers.map((t, i) => ({
        medium: tiers[specTiers.length + i]?.medium ?? ('STORAGE' as const),
        locality: t.locality,
        enableKvEvents: t.enableKvEvents,
      })),
    ];
    const eventsOn = engineConfig.kvEventsConfig?.enable_kv_cache_events === true;
    this.offloadConfig.secondaryTiers.forEach((t, i) => {
      if (t.enableKvEvents && !eventsOn && role === 'scheduler') {
        log.warnOnce(
          "enable_kv_events is set on secondary tier %d ('%s') but KV cache events are disabled globally; the tier will not emit events (enable them with --kv-events-config).",
          i,
          t.type === 'module' ? t.className : t.type,
        );
      }
    });
    if (role === 'scheduler') {
      this.scheduler = new OffloadScheduler(this.layout, this.offloadConfig, tiers, {
        tierInfo,
        policyClass: spec?.policyClass() ?? null,
        p2p: p2pTier >= 0 ? { tier: p2pTier, hub: (tiers[p2pTier] as P2PTier).hub } : null,
      });
      log.info(
        'OffloadingConnector: %d CPU slots of %d bytes (%d tokens per chunk, %s eviction)%s',
        this.layout.numSlots,
        this.layout.slotBytes,
        this.layout.chunkTokens,
        this.offloadConfig.evictionPolicy,
        tiers.length > 0 ? `, secondary tiers: ${tiers.map((t) => t.kind).join(', ')}` : '',
      );
    } else {
      this.worker = new OffloadWorker(this.layout, tiers);
    }
  }

  /**
   * With a p2p tier: the P/D flow a proxy drives and where peers reach the tier's control
   * socket (the base port; a data-parallel engine binds base + its rank).
   */
  override advertise(): ConnectorAdvertisement {
    const hub = this.scheduler?.p2p?.hub;
    if (!hub) return {};
    const { host, port } = hub.options;
    return {
      connector: 'OffloadingConnector',
      p2p_host: host,
      p2p_port: port,
      p2p_base_port: port - this.engineConfig.parallel.dataParallelRank,
    };
  }

  override get requiresKvDelivery(): boolean {
    return false;
  }

  // ---- worker side ----

  /** Also probes the secondary tiers that can be misconfigured (obj): startup fails with the field to fix. */
  override async registerKvCaches(memory: PagedKVMemory): Promise<void> {
    const worker = this.#worker();
    try {
      await Promise.all(worker.tiers.map((t) => t.probe?.()));
    } catch (err) {
      await worker.shutdown();
      throw err;
    }
    worker.register(memory);
  }

  /** Stores copy synchronously in waitForSave, so no preempted block is still being read. */
  override handlePreemptions(): void {}

  startLoadKv(_ctx: ForwardContext): void {
    const meta = this.getConnectorMetadata<OffloadMetadata>();
    if (Array.isArray(meta.loads)) this.#worker().startLoads(meta);
  }

  waitForLayerLoad(_layerName: string): void {}

  saveKvLayer(_layerName: string, _ctx: ForwardContext): void {}

  waitForSave(): void {
    const meta = this.getConnectorMetadata<OffloadMetadata>();
    if (Array.isArray(meta.stores)) this.#worker().stores(meta);
  }

  override getFinished(): { sending: string[] | null; recving: string[] | null } {
    const recving = this.#worker().takeFinishedLoads();
    return { sending: null, recving: recving.length > 0 ? recving : null };
  }

  override getBlockIdsWithLoadErrors(): number[] {
    return this.#worker().takeLoadErrors();
  }

  override getKvConnectorStats(): KVConnectorStatsData | null {
    return { ...(this.scheduler ? this.scheduler.stats() : this.#worker().stats()) };
  }

  override buildConnectorWorkerMeta(): KVConnectorWorkerMetadata | null {
    return { [WORKER_META_KEY]: this.#worker().workerMeta() };
  }

  override async shutdown(): Promise<void> {
    if (this.worker) await this.worker.shutdown();
    if (this.scheduler) await Promise.all(this.scheduler.tiers.map((t) => t.close()));
  }

  // ---- scheduler side ----

  getNumNewMatchedTokens(request: ConnectorRequest, numComputedTokens: number): MatchedTokens {
    return this.#scheduler().getNumNewMatchedTokens(request, numComputedTokens);
  }

  updateStateAfterAlloc(request: ConnectorRequest, blocks: KVCacheBlocks, numExternalTokens: number): void {
    this.#scheduler().updateStateAfterAlloc(request, blocks, numExternalTokens);
  }

  override getExternalCacheHitSources(
    request: ConnectorRequest,
    numExternalTokens: number,
  ): CachedTokensBySource {
    return this.#scheduler().externalCacheHitSources(request, numExternalTokens);
  }

  buildConnectorMeta(schedulerOutput: SchedulerOutput): OffloadMetadata {
    return this.#scheduler().buildConnectorMeta(schedulerOutput);
  }

  override updateConnectorOutput(output: KVConnectorOutput): void {
    this.#scheduler().updateConnectorOutput(output);
  }

  override requestFinished(request: ConnectorRequest, _blockIds: number[][]): RequestFinishedResult {
    this.#scheduler().requestFinished(request);
    return { delayFree: false, kvTransferParams: null };
  }

  override takeEvents(): KVCacheEvent[] {
    return this.scheduler ? this.scheduler.takeEvents() : [];
  }

  override resetCache(): boolean {
    return this.scheduler ? this.scheduler.resetCache() : true;
  }

  #scheduler(): OffloadScheduler {
    if (!this.scheduler)
      throw new Error(`OffloadingConnector: scheduler hook called on the ${this.role} role`);
    return this.scheduler;
  }

  #worker(): OffloadWorker {
    if (!this.worker) throw new Error(`OffloadingConnector: worker hook called on the ${this.role} role`);
    return this.worker;
  }
}
