/**
 * The connector API: one abstract class for both roles, mirroring vLLM's KVConnectorBase_V1
 * (docs/connector-api.md). Two instances exist per engine, one per role; they share nothing
 * and talk only through the plain-data metadata and outputs of ./types.ts.
 *
 * Scheduler-side methods are synchronous and must be cheap: the scheduler calls them on every
 * step. Worker-side methods may return promises (transfers are asynchronous in Node.js); the
 * model runner awaits them in vLLM's order
 * (docs/engine.md#one-step-on-a-rank-worker-side-connector-order).
 */
import type { ExtraConfigSchema } from '../config/extra-config.ts';
import type { EngineConfig, KVTransferConfigLike } from '../config/types.ts';
import { KVError } from '../errors/kv-error.ts';
import type { KVCacheBlocks, KVCacheConfig, KVCacheEvent, PagedKVMemory } from '../kv/interfaces.ts';
import type { ConnectorAdvertisement } from '../wire/index.ts';
import type { CachedTokensBySource } from './cache-hit-source.ts';
import type { ConnectorMetricSpec } from './metric-specs.ts';
import type {
  ConnectorRequest,
  ForwardContext,
  KVConnectorHandshakeMetadata,
  KVConnectorMetadata,
  KVConnectorOutput,
  KVConnectorRole,
  KVConnectorStatsData,
  KVConnectorWorkerMetadata,
  KVTransferParams,
  MatchedTokens,
  RequestFinishedResult,
  SchedulerOutput,
} from './types.ts';

export type MaybePromise<T> = T | Promise<T>;

export abstract class KVConnectorBase {
  /** True if the connector handles several KV cache groups (vLLM's SupportsHMA). */
  static supportsHMA = false;

  /**
   * The keys of `kv_connector_extra_config` this connector reads, when it declares them
   * (read with readExtraConfig); `kvconnect check-config` warns about keys not listed.
   */
  static extraConfigSchema: ExtraConfigSchema | undefined = undefined;

  /**
   * Validates this connector's `kv_connector_extra_config` and returns it parsed (what
   * `kvconnect check-config` reports). Connectors with options override it; throw a KVError
   * naming the key. The default accepts anything and returns it unchanged.
   */
  static validateExtraConfig(extra: Record<string, unknown>, _engineConfig: EngineConfig): unknown {
    return extra;
  }

  /**
   * vLLM's build_prom_metrics: the Prometheus metrics this connector's stats feed
   * (docs/connector-api.md#metrics). Override with specs typed against the stats
   * getKvConnectorStats() returns (`ConnectorMetricSpec<MyStats>`); `config` is this
   * connector's transfer config. The default declares none.
   */
  static metricSpecs(_config: KVTransferConfigLike): MaybePromise<readonly ConnectorMetricSpec[]> {
    return [];
  }

  readonly engineConfig: EngineConfig;
  readonly kvTransferConfig: KVTransferConfigLike;
  readonly kvCacheConfig: KVCacheConfig;
  readonly role: KVConnectorRole;
  protected connectorMetadata: KVConnectorMetadata | null = null;

  constructor(engineConfig: EngineConfig, role: KVConnectorRole, kvCacheConfig: KVCacheConfig) {
    if (!engineConfig.kvTransferConfig) {
      throw new KVError(
        'KV_TRANSFER_CONFIG_MISSING',
        'kv_transfer_config must be set for KVConnectorBase_V1',
        {
          hint: 'Construct connectors through KVConnectorFactory.createConnector with an engine config that has a kv_transfer_config.',
        },
      );
    }
    this.engineConfig = engineConfig;
    this.kvTransferConfig = engineConfig.kvTransferConfig;
    this.kvCacheConfig = kvCacheConfig;
    this.role = role;
  }

  // ---- capabilities (instance-level where vLLM derives them from the config) ----

  /** A producer whose hand-off is pending must not lose its blocks to preemption. */
  get requiresKvDelivery(): boolean {
    return this.kvTransferConfig.isKvProducer;
  }

  /** Prefer one contiguous KV buffer for all layers (docs/connector-api.md#construction). */
  get preferCrossLayerBlocks(): boolean {
    return false;
  }

  // ---- worker side (docs/connector-api.md#worker-side) ----

  #engineWakeup: (() => void) | null = null;

  /**
   * kvconnect (vLLM's engine loop polls without sleeping): the engine's hook that ends its
   * idle wait between steps. A worker-side connector calls wakeEngine() when asynchronous work
   * completes outside a step (a load landed, a peer's notification arrived), so the step that
   * reports it runs at once instead of at the engine's next idle poll
   * (docs/connector-api.md#waking-the-engine). A composite connector passes it to its children.
   */
  setEngineWakeup(wakeup: (() => void) | null): void {
    this.#engineWakeup = wakeup;
  }

  /**
   * kvconnect: true when every asynchronous completion of this connector (a load landed, a
   * transfer done, a peer's notification) calls wakeEngine(). The engine then waits longer
   * between idle steps while only this connector has work pending; otherwise it polls every
   * few milliseconds (docs/connector-api.md#waking-the-engine). The default: false.
   */
  get wakesEngineOnCompletion(): boolean {
    return false;
  }

  /** Ends the engine's idle wait; a no-op when no engine installed a hook (e.g. a rank's thread). */
  wakeEngine(): void {
    this.#engineWakeup?.();
  }

  /** Once, after the KV memory is allocated. */
  registerKvCaches(_memory: PagedKVMemory): MaybePromise<void> {}

  /** Every step, before anything else: act on preempted requests before their blocks are reused. */
  handlePreemptions(_metadata: KVConnectorMetadata): MaybePromise<void> {}

  /**
   * kvconnect's write tracking (not in vLLM): these blocks were given to new content this
   * step (called after handlePreemptions, before startLoadKv). A connector that keeps
   * anything derived from block contents drops it here (docs/connector-api.md#write-tracking).
   */
  kvBlocksAllocated(_blockIds: readonly number[]): void {}

  /**
   * kvconnect's write tracking (not in vLLM): this step's forward pass filled these blocks
   * (called after the forward pass, before waitForSave); their KV stays as it is until they
   * are allocated again.
   */
  kvBlocksFilled(_blockIds: readonly number[]): void {}

  bindConnectorMetadata(metadata: KVConnectorMetadata): void {
    this.connectorMetadata = metadata;
  }

  clearConnectorMetadata(): void {
    this.connectorMetadata = null;
  }

  hasConnectorMetadata(): boolean {
    return this.connectorMetadata !== null;
  }

  protected getConnectorMetadata<M extends KVConnectorMetadata = KVConnectorMetadata>(): M {
    if (this.connectorMetadata === null) {
      throw new KVError('KV_CONNECTOR_METADATA_UNBOUND', 'Connector metadata is not bound for this step', {
        hint: 'Worker hooks run only between bindConnectorMetadata and clearConnectorMetadata.',
      });
    }
    return this.connectorMetadata as M;
  }

  /** Every step (idle steps too), before the forward pass: start loads, drive background work. */
  abstract startLoadKv(ctx: ForwardContext): MaybePromise<void>;

  /** Inside each attention layer, before attention: resolve once that layer's KV is present. */
  abstract waitForLayerLoad(layerName: string): MaybePromise<void>;

  /** Inside each attention layer, after attention: start saving that layer's KV. */
  abstract saveKvLayer(layerName: string, ctx: ForwardContext): MaybePromise<void>;

  /** After the forward pass: resolve once saves no longer read the paged buffer. */
  abstract waitForSave(): MaybePromise<void>;

  /** Ids whose async send / receive completed on this worker since the last call. */
  getFinished(
    _finishedReqIds: readonly string[],
  ): MaybePromise<{ sending: string[] | null; recving: string[] | null }> {
    return { sending: null, recving: null };
  }

  /** Block ids whose load failed (drained on each call). */
  getBlockIdsWithLoadErrors(): number[] {
    return [];
  }

  /** Stats since the last call, or null. */
  getKvConnectorStats(): KVConnectorStatsData | null {
    return null;
  }

  getKvConnectorKvCacheEvents(): KVCacheEvent[] | null {
    return null;
  }

  buildConnectorWorkerMeta(): KVConnectorWorkerMetadata | null {
    return null;
  }

  getHandshakeMetadata(): KVConnectorHandshakeMetadata | null {
    return null;
  }

  /** Both roles: finish or abort async work, close sockets, release memory. */
  shutdown(): MaybePromise<void> {}

  // ---- scheduler side (docs/connector-api.md#scheduler-side) ----

  /** When a request is added to the scheduler. */
  onNewRequest(_request: ConnectorRequest): void {}

  /**
   * Tokens beyond `numComputedTokens` (the block-aligned local hit) that this connector can
   * provide. Must be free of side effects: it may be called again on later steps.
   */
  abstract getNumNewMatchedTokens(request: ConnectorRequest, numComputedTokens: number): MatchedTokens;

  /** After allocation succeeded, for every admitted request (numExternalTokens may be 0). */
  abstract updateStateAfterAlloc(
    request: ConnectorRequest,
    blocks: KVCacheBlocks,
    numExternalTokens: number,
  ): void;

  /**
   * Where the `numExternalTokens` a request was just admitted with come from (after
   * updateStateAfterAlloc), for vllm:prompt_tokens_cached_by_source. A connector that
   * cannot tell counts them all as `external_unspecified`, as vLLM's default does.
   */
  getExternalCacheHitSources(_request: ConnectorRequest, numExternalTokens: number): CachedTokensBySource {
    return numExternalTokens > 0 ? { external_unspecified: numExternalTokens } : {};
  }

  /** Once per step, at the end of schedule(); resets per-step state. */
  abstract buildConnectorMeta(schedulerOutput: SchedulerOutput): KVConnectorMetadata;

  /** The aggregated worker output, before the scheduler processes finished sets. */
  updateConnectorOutput(_output: KVConnectorOutput): void {}

  /**
   * Exactly once when a request finishes, before its blocks are freed. `blockIds` has one
   * list per KV cache group (connectors without HMA support always get exactly one).
   */
  requestFinished(_request: ConnectorRequest, _blockIds: number[][]): RequestFinishedResult {
    return { delayFree: false, kvTransferParams: null };
  }

  /**
   * kvconnect: the kv_transfer_params requestFinished will return, known before the step that
   * completes the request's prompt and finishes it runs its forward pass: `blockIds` (one list
   * per group) and the request's `numComputedTokens` (the scheduler counts a step's tokens when
   * it schedules them) are what requestFinished will see. A prefill server sends them ahead to a
   * proxy that asked (docs/connector-api.md#params-ahead), which starts the decode leg during
   * the prefill. No side effects; null (the default): not known ahead.
   */
  kvTransferParamsAhead(_request: ConnectorRequest, _blockIds: number[][]): KVTransferParams | null {
    return null;
  }

  /** Connector-originated KV cache events since the last call. */
  takeEvents(): KVCacheEvent[] {
    return [];
  }

  /**
   * kvconnect: true after requestFinished staged metadata a peer is waiting for (a finished
   * request's blocks to grant or push). The engine then runs a connector-only step at the end
   * of the same step, so the workers act on it before the answer naming the blocks leaves
   * (docs/connector-api.md#hand-off-in-the-same-step). The default: false (the next step carries it).
   */
  hasHandoffMetadata(): boolean {
    return false;
  }

  /** Keeps the engine loop stepping while transfers are in flight with no live request. */
  hasPendingPushWork(): boolean {
    return false;
  }

  /** Expected finished notifications per request; null = the world size. */
  getFinishedCount(): number | null {
    return null;
  }

  /** The scheduler-side connector receives every worker's handshake metadata, keyed by tp rank. */
  setXferHandshakeMetadata(_metadata: Record<number, KVConnectorHandshakeMetadata>): MaybePromise<void> {}

  /** Clear the external cache. false = failure, null = not implemented. */
  resetCache(): boolean | null {
    return null;
  }

  /**
   * What GET /kvconnect/info tells peers and proxies about this connector, asked of the
   * scheduler-side instance (docs/connector-api.md#what-a-connector-advertises): the P/D
   * protocol a proxy drives, side-channel coordinates, transfer mode. The default: nothing.
   */
  advertise(): ConnectorAdvertisement {
    return {};
  }
}

export type KVConnectorClass = (abstract new (
  engineConfig: EngineConfig,
  role: KVConnectorRole,
  kvCacheConfig: KVCacheConfig,
) => KVConnectorBase) & {
  supportsHMA: boolean;
  extraConfigSchema?: ExtraConfigSchema | undefined;
  validateExtraConfig?(extra: Record<string, unknown>, engineConfig: EngineConfig): unknown;
  metricSpecs?(config: KVTransferConfigLike): MaybePromise<readonly ConnectorMetricSpec[]>;
};
