/**
 * The facades vLLM users name in kv_connector: NixlConnector (= NixlPullConnector) and
 * NixlPushConnector. Each instance is one role: the scheduler side (./scheduler.ts) or the
 * worker side (./worker.ts); this file only routes the API calls and validates options.
 */
import type { ExtraConfigSchema } from '../../config/extra-config.ts';
import type { EngineConfig } from '../../config/types.ts';
import { KVConnectorBase } from '../../connector/base.ts';
import type { ConnectorMetricSpec } from '../../connector/metric-specs.ts';
import type {
  ConnectorRequest,
  ForwardContext,
  KVConnectorHandshakeMetadata,
  KVConnectorMetadata,
  KVConnectorOutput,
  KVConnectorRole,
  KVConnectorStatsData,
  KVTransferParams,
  MatchedTokens,
  RequestFinishedResult,
} from '../../connector/types.ts';
import { KVError } from '../../errors/kv-error.ts';
import type { KVCacheBlocks, KVCacheConfig, PagedKVMemory } from '../../kv/interfaces.ts';
import { getLogger } from '../../logging/logger.ts';
import { type CreateAgentOptions, createTransferAgent, type TransferAgent } from '../../transfer/index.ts';
import type { ConnectorAdvertisement, PdConnector } from '../../wire/index.ts';
import { NIXL_EXTRA_CONFIG, type NixlOptions, parseNixlOptions, refuseBidirectionalPush } from './config.ts';
import type { TransferMode } from './handshake.ts';
import { NIXL_METRICS } from './metrics.ts';
import { NixlScheduler } from './scheduler.ts';
import type { NixlStepMetadata } from './step-metadata.ts';
import { NixlWorker } from './worker.ts';

const log = getLogger('kvconnect.connectors.nixl.connector');

export const KV_BOTH_DEPRECATION =
  "Using kv_role='kv_both' with NixlConnector is deprecated and will be removed in a future release. " +
  "Please set kv_role='kv_producer' for prefill instances and kv_role='kv_consumer' for decode instances. ";

abstract class NixlBaseConnector extends KVConnectorBase {
  static override supportsHMA = true;

  static override extraConfigSchema: ExtraConfigSchema = NIXL_EXTRA_CONFIG;

  static override validateExtraConfig(
    extra: Record<string, unknown>,
    engineConfig: EngineConfig,
  ): NixlOptions {
    return parseNixlOptions(extra, engineConfig);
  }

  static override metricSpecs(): readonly ConnectorMetricSpec[] {
    return NIXL_METRICS;
  }

  readonly options: NixlOptions;
  readonly #mode: TransferMode;
  readonly #scheduler: NixlScheduler | null = null;
  readonly #worker: NixlWorker | null = null;

  constructor(
    engineConfig: EngineConfig,
    role: KVConnectorRole,
    kvCacheConfig: KVCacheConfig,
    mode: TransferMode,
  ) {
    super(engineConfig, role, kvCacheConfig);
    this.#mode = mode;
    this.options = parseNixlOptions(this.kvTransferConfig.kv_connector_extra_config, engineConfig);
    if (mode === 'push') refuseBidirectionalPush(this.options);
    if (this.kvTransferConfig.kv_role === 'kv_both') log.warnOnce(KV_BOTH_DEPRECATION);
    if (role === 'scheduler')
      this.#scheduler = new NixlScheduler(engineConfig, kvCacheConfig, mode, this.options);
    else if (role === 'worker')
      this.#worker = new NixlWorker(
        engineConfig,
        kvCacheConfig,
        mode,
        this.options,
        (o) => this.createTransferAgent(o),
        () => this.wakeEngine(),
      );
    else {
      throw new KVError('NIXL_BAD_ROLE', `Unsupported KVConnectorRole: ${String(role)}`, {
        hint: "Construct the connector with role 'scheduler' or 'worker'.",
      });
    }
  }

  /**
   * Creates the worker's transfer agent (once, when the KV caches are registered). A subclass
   * may plug seams into it (AgentSeams, for fault injection: test/connectors/helpers/fault-connectors.ts).
   */
  protected createTransferAgent(options: CreateAgentOptions): Promise<TransferAgent> {
    return createTransferAgent(options);
  }

  /** Scheduler role: where peers reach this engine's side channel (null before startup). */
  get sideChannelAddress(): { host: string; port: number } | null {
    return this.#scheduler?.sideChannelAddress ?? null;
  }

  /** The flow a proxy drives (NixlPullConnector is NixlConnector's), and where D handshakes with P. */
  override advertise(): ConnectorAdvertisement {
    const connector: PdConnector = this.#mode === 'push' ? 'NixlPushConnector' : 'NixlConnector';
    const address = this.sideChannelAddress;
    return {
      connector,
      transfer_mode: this.#mode,
      ...(address ? { side_channel_host: address.host, side_channel_port: address.port } : {}),
    };
  }

  /** Worker role: this rank's transfer agent (tests, tools). */
  get worker(): NixlWorker | null {
    return this.#worker;
  }

  // ---- worker side ----

  override async registerKvCaches(memory: PagedKVMemory): Promise<void> {
    await this.#worker?.registerKvCaches(memory);
  }

  /** Write tracking (connector-api.md#write-tracking): new content drops the blocks' recorded checksums. */
  override kvBlocksAllocated(blockIds: readonly number[]): void {
    this.#worker?.agent?.forgetBlocks(blockIds);
  }

  /**
   * Write tracking: the agent records the filled blocks' checksums (on its thread when
   * threaded), for the WRITEs and grants that send them; a consumer sends nothing, unless
   * bidirectional (a next turn's prefill READs its blocks back).
   */
  override kvBlocksFilled(blockIds: readonly number[]): void {
    const w = this.#worker;
    if (this.kvTransferConfig.isKvProducer || this.options.bidirectionalKvXfer)
      w?.agent?.recordBlocks(blockIds, w.kvRegionIds);
  }

  override getHandshakeMetadata(): KVConnectorHandshakeMetadata | null {
    const p = this.#worker?.getHandshakeMetadata();
    return p ? { ...p } : null;
  }

  startLoadKv(_ctx: ForwardContext): void {
    this.#worker?.startLoadKv(this.getConnectorMetadata<NixlStepMetadata>());
  }

  waitForLayerLoad(_layerName: string): void {}

  saveKvLayer(_layerName: string, _ctx: ForwardContext): void {}

  waitForSave(): void {}

  override getFinished(_finishedReqIds: readonly string[]): {
    sending: string[] | null;
    recving: string[] | null;
  } {
    return this.#worker?.getFinished() ?? { sending: null, recving: null };
  }

  override getBlockIdsWithLoadErrors(): number[] {
    return this.#worker?.getBlockIdsWithLoadErrors() ?? [];
  }

  override getKvConnectorStats(): KVConnectorStatsData | null {
    return this.#worker?.getStats() ?? null;
  }

  override async shutdown(): Promise<void> {
    await this.#worker?.shutdown();
    await this.#scheduler?.shutdown();
  }

  // ---- scheduler side ----

  override async setXferHandshakeMetadata(
    metadata: Record<number, KVConnectorHandshakeMetadata>,
  ): Promise<void> {
    await this.#scheduler?.startSideChannel(metadata);
  }

  override onNewRequest(request: ConnectorRequest): void {
    this.#scheduler?.onNewRequest(request);
  }

  getNumNewMatchedTokens(request: ConnectorRequest, numComputedTokens: number): MatchedTokens {
    return (
      this.#scheduler?.getNumNewMatchedTokens(request, numComputedTokens) ?? { count: 0, loadAsync: false }
    );
  }

  updateStateAfterAlloc(request: ConnectorRequest, blocks: KVCacheBlocks, numExternalTokens: number): void {
    this.#scheduler?.updateStateAfterAlloc(request, blocks, numExternalTokens);
  }

  buildConnectorMeta(): KVConnectorMetadata {
    return this.#scheduler?.buildConnectorMeta() ?? {};
  }

  override updateConnectorOutput(output: KVConnectorOutput): void {
    this.#scheduler?.updateConnectorOutput(output);
  }

  override requestFinished(request: ConnectorRequest, blockIds: number[][]): RequestFinishedResult {
    return (
      this.#scheduler?.requestFinished(request, blockIds) ?? { delayFree: false, kvTransferParams: null }
    );
  }

  override kvTransferParamsAhead(request: ConnectorRequest, blockIds: number[][]): KVTransferParams | null {
    return this.#scheduler?.paramsAhead(request, blockIds) ?? null;
  }

  override hasPendingPushWork(): boolean {
    return this.#scheduler?.hasPendingPushWork() ?? false;
  }

  /** Loads, READs served, WRITEs and notifications all wake the engine (./worker.ts). */
  override get wakesEngineOnCompletion(): boolean {
    return true;
  }

  override hasHandoffMetadata(): boolean {
    return this.#scheduler?.hasStagedSends() ?? false;
  }
}

/** Pull (READ) mode: the consumer reads the producer's blocks (vLLM's default). */
export class NixlPullConnector extends NixlBaseConnector {
  constructor(engineConfig: EngineConfig, role: KVConnectorRole, kvCacheConfig: KVCacheConfig) {
    super(engineConfig, role, kvCacheConfig, 'pull');
  }
}

/** vLLM's name for the pull connector. */
export class NixlConnector extends NixlPullConnector {}

/** Push (WRITE) mode: the producer writes into blocks the consumer registered. */
export class NixlPushConnector extends NixlBaseConnector {
  static override validateExtraConfig(
    extra: Record<string, unknown>,
    engineConfig: EngineConfig,
  ): NixlOptions {
    const opts = parseNixlOptions(extra, engineConfig);
    refuseBidirectionalPush(opts);
    return opts;
  }

  constructor(engineConfig: EngineConfig, role: KVConnectorRole, kvCacheConfig: KVCacheConfig) {
    super(engineConfig, role, kvCacheConfig, 'push');
  }
}
