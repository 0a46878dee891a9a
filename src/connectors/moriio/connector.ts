/**
 * MoRIIOConnector (docs/connectors/moriio.md): AMD's P/D connector, re-implemented on
 * kvconnect's transfer agent. The facade routes each role to ./scheduler.ts or ./worker.ts.
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
  MatchedTokens,
  RequestFinishedResult,
  SchedulerOutput,
} from '../../connector/types.ts';
import type { KVCacheBlocks, KVCacheConfig, PagedKVMemory } from '../../kv/interfaces.ts';
import { getLogger } from '../../logging/logger.ts';
import { type CreateAgentOptions, createTransferAgent, type TransferAgent } from '../../transfer/index.ts';
import type { ConnectorAdvertisement } from '../../wire/index.ts';
import { MORIIO_EXTRA_CONFIG, type MoRIIOConfig, parseMoRIIOConfig } from './config.ts';
import { buildPing, DiscoveryPinger } from './discovery.ts';
import { MORIIO_METRICS } from './metrics.ts';
import { MoRIIOScheduler } from './scheduler.ts';
import type { MoRIIOStepMetadata } from './step-metadata.ts';
import { MoRIIOWorker } from './worker.ts';

const log = getLogger('kvconnect.connectors.moriio.connector');

export const RDMA_AS_TCP_NOTICE =
  "MoRIIO backend 'rdma' runs over kvconnect's tcp transport: Node.js has no RDMA verbs, so KV blocks travel over TCP sockets between hosts.";

export class MoRIIOConnector extends KVConnectorBase {
  static override supportsHMA = false;

  static override extraConfigSchema: ExtraConfigSchema = MORIIO_EXTRA_CONFIG;

  static override validateExtraConfig(
    extra: Record<string, unknown>,
    engineConfig: EngineConfig,
  ): MoRIIOConfig {
    return parseMoRIIOConfig(extra, engineConfig);
  }

  static override metricSpecs(): readonly ConnectorMetricSpec[] {
    return MORIIO_METRICS;
  }

  readonly moriioConfig: MoRIIOConfig;
  readonly #scheduler: MoRIIOScheduler | null = null;
  readonly #worker: MoRIIOWorker | null = null;
  #pinger: DiscoveryPinger | null = null;

  constructor(engineConfig: EngineConfig, role: KVConnectorRole, kvCacheConfig: KVCacheConfig) {
    super(engineConfig, role, kvCacheConfig);
    this.moriioConfig = parseMoRIIOConfig(this.kvTransferConfig.kv_connector_extra_config, engineConfig);
    const cfg = this.moriioConfig;
    if (role === 'scheduler') {
      this.#scheduler = new MoRIIOScheduler(cfg, engineConfig, kvCacheConfig);
      if (cfg.backend === 'rdma') log.info(RDMA_AS_TCP_NOTICE);
      if (cfg.proxyIp !== '') {
        const ping = buildPing(cfg, this.#scheduler.isProducer, engineConfig.parallel.dataParallelSize);
        this.#pinger = new DiscoveryPinger(cfg.proxyIp, cfg.proxyPingPort, ping);
        this.#pinger.start();
      }
    } else {
      this.#worker = new MoRIIOWorker(
        cfg,
        engineConfig,
        kvCacheConfig,
        (o) => this.createTransferAgent(o),
        () => this.wakeEngine(),
      );
    }
  }

  /**
   * Creates the worker's transfer agent (once, when the KV caches are registered). A subclass
   * may plug seams into it (AgentSeams, for fault injection: test/connectors/helpers/fault-connectors.ts).
   */
  protected createTransferAgent(options: CreateAgentOptions): Promise<TransferAgent> {
    return createTransferAgent(options);
  }

  /** MoRIIO's identity is host_ip:handshake_port; it replaces kv_transfer_config.engine_id. */
  get engineId(): string {
    return this.moriioConfig.engineId;
  }

  /** Worker role: this rank's worker (tests, tools). */
  get worker(): MoRIIOWorker | null {
    return this.#worker;
  }

  /** Scheduler role: the discovery pinger when proxy_ip is set. */
  get pinger(): DiscoveryPinger | null {
    return this.#pinger;
  }

  /** What a proxy needs to address this engine: the addresses and mode of its discovery ping. */
  override advertise(): ConnectorAdvertisement {
    const cfg = this.moriioConfig;
    const ping = buildPing(
      cfg,
      this.#scheduler?.isProducer ?? false,
      this.engineConfig.parallel.dataParallelSize,
    );
    return {
      connector: 'MoRIIOConnector',
      engine_id: cfg.engineId,
      zmq_address: ping.zmq_address,
      http_address: ping.http_address,
      transfer_mode: ping.transfer_mode,
      backend: cfg.backend,
    };
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
   * threaded), for the grants that send them (READ mode); a consumer sends nothing, and a
   * WRITE-mode producer recorded them layer by layer as it pushed them.
   */
  override kvBlocksFilled(blockIds: readonly number[]): void {
    const w = this.#worker;
    if (this.kvTransferConfig.isKvProducer && w && !w.recordsPerLayer)
      w.agent?.recordBlocks(blockIds, w.kvRegionIds);
  }

  override getHandshakeMetadata(): KVConnectorHandshakeMetadata | null {
    const p = this.#worker?.getHandshakeMetadata();
    return p ? { ...p } : null;
  }

  async startLoadKv(_ctx: ForwardContext): Promise<void> {
    await this.#worker?.startLoadKv(this.getConnectorMetadata<MoRIIOStepMetadata>());
  }

  async waitForLayerLoad(layerName: string): Promise<void> {
    await this.#worker?.waitForLayerLoad(layerName);
  }

  async saveKvLayer(layerName: string, _ctx: ForwardContext): Promise<void> {
    await this.#worker?.saveKvLayer(layerName);
  }

  async waitForSave(): Promise<void> {
    await this.#worker?.waitForSave();
  }

  override getFinished(_ids: readonly string[]): { sending: string[] | null; recving: string[] | null } {
    return this.#worker?.getFinished() ?? { sending: null, recving: null };
  }

  override getBlockIdsWithLoadErrors(): number[] {
    return this.#worker?.getBlockIdsWithLoadErrors() ?? [];
  }

  /** Worker: MoRIIOStatsData of this rank; scheduler: MoRIIOSchedulerStatsData. Drained per call. */
  override getKvConnectorStats(): KVConnectorStatsData | null {
    const data = this.#worker ? this.#worker.getStats() : (this.#scheduler?.takeStats() ?? null);
    return data ? { ...data } : null;
  }

  override async shutdown(): Promise<void> {
    this.#pinger?.stop();
    await this.#worker?.shutdown();
  }

  // ---- scheduler side ----

  getNumNewMatchedTokens(request: ConnectorRequest, numComputedTokens: number): MatchedTokens {
    return (
      this.#scheduler?.getNumNewMatchedTokens(request, numComputedTokens) ?? { count: 0, loadAsync: false }
    );
  }

  updateStateAfterAlloc(request: ConnectorRequest, blocks: KVCacheBlocks, numExternalTokens: number): void {
    this.#scheduler?.updateStateAfterAlloc(request, blocks, numExternalTokens);
  }

  buildConnectorMeta(schedulerOutput: SchedulerOutput): KVConnectorMetadata {
    return this.#scheduler?.buildConnectorMeta(schedulerOutput) ?? {};
  }

  override updateConnectorOutput(output: KVConnectorOutput): void {
    this.#scheduler?.updateConnectorOutput(output);
  }

  override requestFinished(request: ConnectorRequest, blockIds: number[][]): RequestFinishedResult {
    return (
      this.#scheduler?.requestFinished(request, blockIds) ?? { delayFree: false, kvTransferParams: null }
    );
  }

  override hasPendingPushWork(): boolean {
    return this.#scheduler?.hasPendingWork() ?? false;
  }

  /** Every peer message (blocks registered, write done, release) wakes the engine (./worker.ts). */
  override get wakesEngineOnCompletion(): boolean {
    return true;
  }
}
