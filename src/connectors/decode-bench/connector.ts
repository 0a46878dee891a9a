/**
 * DecodeBenchConnector (docs/connectors/decode-bench.md): benchmarks a decode instance
 * without a prefill instance. Each request reports all but its last token as external, once
 * (./scheduler.ts), and the worker fills those blocks (every KV cache group) with synthetic
 * values in the same step (./worker.ts), so only the last prompt token is computed and
 * decoding starts at once.
 */
import type { ExtraConfigSchema } from '../../config/extra-config.ts';
import type { EngineConfig } from '../../config/types.ts';
import { KVConnectorBase } from '../../connector/base.ts';
import type {
  ConnectorRequest,
  ForwardContext,
  KVConnectorRole,
  KVConnectorStatsData,
  MatchedTokens,
  RequestFinishedResult,
  SchedulerOutput,
} from '../../connector/types.ts';
import type { KVCacheBlocks, KVCacheConfig, PagedKVMemory } from '../../kv/interfaces.ts';
import { DECODE_BENCH_EXTRA_CONFIG, type DecodeBenchConfig, parseDecodeBenchConfig } from './config.ts';
import { DecodeBenchScheduler } from './scheduler.ts';
import type { DecodeBenchMetadata } from './step-metadata.ts';
import { DecodeBenchWorker } from './worker.ts';

export class DecodeBenchConnector extends KVConnectorBase {
  static override supportsHMA = true;

  static override extraConfigSchema: ExtraConfigSchema = DECODE_BENCH_EXTRA_CONFIG;

  static override validateExtraConfig(extra: Record<string, unknown>): DecodeBenchConfig {
    return parseDecodeBenchConfig(extra);
  }

  readonly config: DecodeBenchConfig;
  readonly #scheduler: DecodeBenchScheduler;
  #worker: DecodeBenchWorker | null = null;

  constructor(engineConfig: EngineConfig, role: KVConnectorRole, kvCacheConfig: KVCacheConfig) {
    super(engineConfig, role, kvCacheConfig);
    this.config = parseDecodeBenchConfig(this.kvTransferConfig.kv_connector_extra_config);
    this.#scheduler = new DecodeBenchScheduler(kvCacheConfig);
  }

  // ---- scheduler side ----

  getNumNewMatchedTokens(request: ConnectorRequest, numComputedTokens: number): MatchedTokens {
    return this.#scheduler.getNumNewMatchedTokens(request, numComputedTokens);
  }

  updateStateAfterAlloc(request: ConnectorRequest, blocks: KVCacheBlocks, numExternalTokens: number): void {
    this.#scheduler.updateStateAfterAlloc(request, blocks, numExternalTokens);
  }

  buildConnectorMeta(_schedulerOutput: SchedulerOutput): DecodeBenchMetadata {
    return this.#scheduler.buildConnectorMeta();
  }

  override requestFinished(request: ConnectorRequest, blockIds: number[][]): RequestFinishedResult {
    this.#scheduler.requestFinished(request.requestId);
    return super.requestFinished(request, blockIds);
  }

  /** Requests currently marked as filled (for tests: 0 once every request finished). */
  get numFilledRequests(): number {
    return this.#scheduler.numFilled;
  }

  // ---- worker side ----

  override registerKvCaches(memory: PagedKVMemory): void {
    this.#worker = new DecodeBenchWorker(
      memory,
      this.kvCacheConfig,
      this.config,
      this.engineConfig.model.seed,
    );
  }

  startLoadKv(_ctx: ForwardContext): void {
    const fills = this.getConnectorMetadata<Partial<DecodeBenchMetadata>>().fills ?? [];
    if (fills.length > 0) this.#worker?.fill(fills);
  }

  waitForLayerLoad(_layerName: string): void {}

  saveKvLayer(_layerName: string, _ctx: ForwardContext): void {}

  waitForSave(): void {}

  override getKvConnectorStats(): KVConnectorStatsData | null {
    const stats = this.#worker?.takeStats() ?? null;
    return stats ? { ...stats } : null;
  }
}
