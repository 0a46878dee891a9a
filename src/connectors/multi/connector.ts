/**
 * MultiConnector (docs/connectors/multi.md): an ordered list of child connectors used as one.
 * The first child with a hit loads a request; every child sees every request and saves;
 * answers are combined as vLLM combines them (./scheduler.ts, ./worker.ts, and each method
 * here). HMA works only if every child has it (KVConnectorFactory.supportsHMAConfig decides
 * that for the engine).
 */
import type { ExtraConfigSchema } from '../../config/extra-config.ts';
import type { EngineConfig, KVTransferConfigLike } from '../../config/types.ts';
import { KVConnectorBase, type KVConnectorClass } from '../../connector/base.ts';
import type { CachedTokensBySource } from '../../connector/cache-hit-source.ts';
import type { ConnectorMetricSpec } from '../../connector/metric-specs.ts';
import type {
  ConnectorRequest,
  ForwardContext,
  KVConnectorHandshakeMetadata,
  KVConnectorMetadata,
  KVConnectorOutput,
  KVConnectorRole,
  KVConnectorStatsData,
  MatchedTokens,
  RequestFinishedResult,
  SchedulerOutput,
} from '../../connector/types.ts';
import type { KVCacheBlocks, KVCacheConfig, KVCacheEvent, PagedKVMemory } from '../../kv/interfaces.ts';
import { getLogger } from '../../logging/logger.ts';
import type { ConnectorAdvertisement } from '../../wire/index.ts';
import {
  allSupportHMA,
  buildChildren,
  type ChildSpec,
  cachedChildClasses,
  checkChildrenHMA,
  childSpecs,
  resolveChildClasses,
} from './children.ts';
import { MULTI_EXTRA_CONFIG, parseMultiConfig } from './config.ts';
import { multiConnectorMetricSpecs } from './metrics.ts';
import { MultiScheduler } from './scheduler.ts';
import { statsPerChildClass } from './stats.ts';
import type { MultiConnectorMetadata, MultiConnectorWorkerMetadata } from './step-metadata.ts';
import { MultiWorker } from './worker.ts';

const log = getLogger('kvconnect.connectors.multi.connector');

export class MultiConnector extends KVConnectorBase {
  /** The class can hold HMA children; the effective answer is supportsHMAConfig's. */
  static override supportsHMA = true;

  static override extraConfigSchema: ExtraConfigSchema = MULTI_EXTRA_CONFIG;

  static override validateExtraConfig(extra: Record<string, unknown>, engineConfig: EngineConfig): unknown {
    return parseMultiConfig(extra, engineConfig);
  }

  /** The union of the children's metrics, each read from its child's stats. */
  static override metricSpecs(config: KVTransferConfigLike): Promise<readonly ConnectorMetricSpec[]> {
    return multiConnectorMetricSpecs(config);
  }

  /** Loads the classes of every child of this config, so later constructions are synchronous. */
  static async preload(engineConfig: EngineConfig): Promise<void> {
    await resolveChildClasses(childSpecs(engineConfig));
  }

  #children: KVConnectorBase[] = [];
  #childClasses: KVConnectorClass[] = [];
  #ready = false;
  #initError: unknown = null;
  readonly #readyPromise: Promise<void>;
  readonly #scheduler = new MultiScheduler();
  readonly #worker = new MultiWorker();

  constructor(engineConfig: EngineConfig, role: KVConnectorRole, kvCacheConfig: KVCacheConfig) {
    super(engineConfig, role, kvCacheConfig);
    const specs = childSpecs(engineConfig);
    const cached = cachedChildClasses(specs);
    if (cached) {
      this.#install(specs, cached);
      this.#readyPromise = Promise.resolve();
    } else {
      this.#readyPromise = resolveChildClasses(specs).then((classes) => this.#install(specs, classes));
      this.#readyPromise.catch((e: unknown) => {
        this.#initError = e;
      });
    }
  }

  #install(specs: readonly ChildSpec[], classes: KVConnectorClass[]): void {
    checkChildrenHMA(this.engineConfig, classes);
    this.#children = buildChildren(specs, classes, this.role, this.kvCacheConfig);
    this.#childClasses = classes;
    this.#ready = true;
  }

  /** Resolves once every child is built (rejects with the error that prevented it). */
  whenReady(): Promise<void> {
    return this.#readyPromise;
  }

  /** The children, in order (empty until ready). */
  get connectors(): readonly KVConnectorBase[] {
    return this.#children;
  }

  /** True when the list is non-empty and every child class supports HMA. */
  get allChildrenSupportHMA(): boolean {
    return allSupportHMA(this.#childClasses);
  }

  /** Children for a synchronous call: null while still loading; throws if loading failed. */
  #live(): KVConnectorBase[] | null {
    if (this.#initError !== null) throw this.#initError;
    return this.#ready ? this.#children : null;
  }

  async #settled(): Promise<KVConnectorBase[]> {
    await this.#readyPromise;
    return this.#children;
  }

  override get requiresKvDelivery(): boolean {
    return this.#children.some((c) => c.requiresKvDelivery);
  }

  override get preferCrossLayerBlocks(): boolean {
    return this.#children.length > 0 && this.#children.every((c) => c.preferCrossLayerBlocks);
  }

  // ---- scheduler side ----

  override onNewRequest(request: ConnectorRequest): void {
    for (const c of this.#live() ?? []) c.onNewRequest(request);
  }

  getNumNewMatchedTokens(request: ConnectorRequest, numComputedTokens: number): MatchedTokens {
    return this.#scheduler.getNumNewMatchedTokens(this.#live(), request, numComputedTokens);
  }

  updateStateAfterAlloc(request: ConnectorRequest, blocks: KVCacheBlocks, numExternalTokens: number): void {
    this.#scheduler.updateStateAfterAlloc(this.#live() ?? [], request, blocks, numExternalTokens);
  }

  /** The loading child's answer, as vLLM's MultiConnector delegates it. */
  override getExternalCacheHitSources(
    request: ConnectorRequest,
    numExternalTokens: number,
  ): CachedTokensBySource {
    const child = this.#scheduler.loaderOf(this.#live(), request);
    return child
      ? child.getExternalCacheHitSources(request, numExternalTokens)
      : super.getExternalCacheHitSources(request, numExternalTokens);
  }

  buildConnectorMeta(schedulerOutput: SchedulerOutput): MultiConnectorMetadata {
    return this.#scheduler.buildConnectorMeta(this.#live(), schedulerOutput);
  }

  override updateConnectorOutput(output: KVConnectorOutput): void {
    const workerMeta = output.kvConnectorWorkerMeta as Partial<MultiConnectorWorkerMetadata> | null;
    for (const [i, child] of (this.#live() ?? []).entries()) {
      child.updateConnectorOutput({ ...output, kvConnectorWorkerMeta: workerMeta?.metadata?.[i] ?? null });
    }
  }

  override requestFinished(request: ConnectorRequest, blockIds: number[][]): RequestFinishedResult {
    return this.#scheduler.requestFinished(this.#live() ?? [], this.#childClasses, request, blockIds);
  }

  override takeEvents(): KVCacheEvent[] {
    return (this.#live() ?? []).flatMap((c) => c.takeEvents());
  }

  override hasPendingPushWork(): boolean {
    return (this.#live() ?? []).some((c) => c.hasPendingPushWork());
  }

  /** Only when every child's completions wake the engine. */
  override get wakesEngineOnCompletion(): boolean {
    const children = this.#live();
    return children !== null && children.length > 0 && children.every((c) => c.wakesEngineOnCompletion);
  }

  override hasHandoffMetadata(): boolean {
    return (this.#live() ?? []).some((c) => c.hasHandoffMetadata());
  }

  override getFinishedCount(): number | null {
    return null;
  }

  override async setXferHandshakeMetadata(
    metadata: Record<number, KVConnectorHandshakeMetadata>,
  ): Promise<void> {
    for (const child of await this.#settled()) await child.setXferHandshakeMetadata(metadata);
  }

  /** The union of the children's advertisements; the first child to name a key wins. */
  override advertise(): ConnectorAdvertisement {
    const union: ConnectorAdvertisement = {};
    for (const child of this.#children) {
      for (const [key, value] of Object.entries(child.advertise()))
        if (!Object.hasOwn(union, key)) union[key] = value;
    }
    return union;
  }

  /** Success unless a child reports failure (null, "not implemented", counts as success). */
  override resetCache(): boolean {
    const results = (this.#live() ?? []).map((c) => c.resetCache() !== false);
    return results.every(Boolean);
  }

  // ---- worker side ----

  override async registerKvCaches(memory: PagedKVMemory): Promise<void> {
    for (const child of await this.#settled()) {
      // A child's wake-up ends the engine's idle wait through this connector's hook.
      child.setEngineWakeup(() => this.wakeEngine());
      await child.registerKvCaches(memory);
    }
  }

  override async handlePreemptions(metadata: KVConnectorMetadata): Promise<void> {
    const meta = metadata as Partial<MultiConnectorMetadata>;
    for (const [i, child] of (await this.#settled()).entries()) {
      await child.handlePreemptions(meta.metadata?.[i] ?? {});
    }
  }

  override kvBlocksAllocated(blockIds: readonly number[]): void {
    for (const child of this.#live() ?? []) child.kvBlocksAllocated(blockIds);
  }

  override kvBlocksFilled(blockIds: readonly number[]): void {
    for (const child of this.#live() ?? []) child.kvBlocksFilled(blockIds);
  }

  override bindConnectorMetadata(metadata: KVConnectorMetadata): void {
    super.bindConnectorMetadata(metadata);
    const meta = metadata as Partial<MultiConnectorMetadata>;
    this.#worker.bind(meta);
    for (const [i, child] of (this.#live() ?? []).entries())
      child.bindConnectorMetadata(meta.metadata?.[i] ?? {});
  }

  override clearConnectorMetadata(): void {
    super.clearConnectorMetadata();
    for (const child of this.#children) child.clearConnectorMetadata();
  }

  async startLoadKv(ctx: ForwardContext): Promise<void> {
    for (const child of await this.#settled()) await child.startLoadKv(ctx);
  }

  async waitForLayerLoad(layerName: string): Promise<void> {
    for (const child of this.#children) await child.waitForLayerLoad(layerName);
  }

  async saveKvLayer(layerName: string, ctx: ForwardContext): Promise<void> {
    for (const child of this.#children) await child.saveKvLayer(layerName, ctx);
  }

  async waitForSave(): Promise<void> {
    for (const child of this.#children) await child.waitForSave();
  }

  /** Union of receives; a send is reported once every child that saves it has finished. */
  override async getFinished(
    finishedReqIds: readonly string[],
  ): Promise<{ sending: string[] | null; recving: string[] | null }> {
    return this.#worker.getFinished(await this.#settled(), finishedReqIds);
  }

  override getBlockIdsWithLoadErrors(): number[] {
    const ids = new Set<number>();
    for (const child of this.#children) for (const id of child.getBlockIdsWithLoadErrors()) ids.add(id);
    return [...ids];
  }

  /** `{childClassName: stats}` (children of one class aggregated), or null. */
  override getKvConnectorStats(): KVConnectorStatsData | null {
    return statsPerChildClass(
      this.#children.map((c) => ({ className: c.constructor.name, stats: c.getKvConnectorStats() })),
    );
  }

  override getKvConnectorKvCacheEvents(): KVCacheEvent[] | null {
    const lists = this.#children.map((c) => c.getKvConnectorKvCacheEvents()).filter((l) => l !== null);
    return lists.length > 0 ? lists.flat() : null;
  }

  override buildConnectorWorkerMeta(): MultiConnectorWorkerMetadata | null {
    const metadata = this.#children.map((c) => c.buildConnectorWorkerMeta());
    return metadata.some((m) => m !== null) ? { metadata } : null;
  }

  /** The first child's non-null handshake metadata. */
  override getHandshakeMetadata(): KVConnectorHandshakeMetadata | null {
    for (const child of this.#children) {
      const meta = child.getHandshakeMetadata();
      if (meta !== null) return meta;
    }
    return null;
  }

  /** Shuts every child down; rethrows the last failure after all were tried. */
  override async shutdown(): Promise<void> {
    await this.#readyPromise.catch(() => {});
    let failure: unknown = null;
    for (const child of this.#children) {
      try {
        await child.shutdown();
      } catch (e) {
        log.error('Exception during connector %s shutdown.', child.constructor.name);
        failure = e;
      }
    }
    if (failure !== null) throw failure;
  }
}
