/**
 * ExampleConnector (alias SharedStorageConnector, docs/connectors/example.md): vLLM's
 * reference connector. A producer stores every prompt it computes (all layers, one folder per
 * prompt key); a consumer whose prompt is stored loads it synchronously before the forward
 * pass. kv_both does both. Not HMA: it sees KV cache group 0 only.
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
import { KVError } from '../../errors/kv-error.ts';
import type { KVCacheBlocks, KVCacheConfig, PagedKVMemory } from '../../kv/interfaces.ts';
import { EXAMPLE_EXTRA_CONFIG, type ExampleConnectorConfig, parseExampleConfig } from './config.ts';
import { ExampleScheduler } from './scheduler.ts';
import { exampleStats } from './stats.ts';
import { type ExampleConnectorMetadata, emptyExampleMetadata } from './step-metadata.ts';
import { layoutTag, promptKey, StorageLayout, storedTokenCount } from './storage-layout.ts';
import { ExampleWorker } from './worker.ts';

export class ExampleConnector extends KVConnectorBase {
  static override supportsHMA = false;

  static override extraConfigSchema: ExtraConfigSchema = EXAMPLE_EXTRA_CONFIG;

  static override validateExtraConfig(extra: Record<string, unknown>): ExampleConnectorConfig {
    return parseExampleConfig(extra);
  }

  readonly config: ExampleConnectorConfig;
  readonly layout: StorageLayout;
  readonly blockSize: number;
  readonly layoutTag: string;
  readonly #state: ExampleScheduler;
  #io: ExampleWorker | null = null;

  constructor(engineConfig: EngineConfig, role: KVConnectorRole, kvCacheConfig: KVCacheConfig) {
    super(engineConfig, role, kvCacheConfig);
    if (kvCacheConfig.groups.length > 1) {
      throw new KVError(
        'KV_CONNECTOR_SINGLE_GROUP_ONLY',
        `ExampleConnector handles one KV cache group, but the KV cache has ${kvCacheConfig.groups.length}`,
        {
          field: 'disable_hybrid_kv_cache_manager',
          hint: 'Start the engine with --disable-hybrid-kv-cache-manager.',
        },
      );
    }
    if (engineConfig.parallel.tensorParallelSize > 1) {
      throw new KVError(
        'KV_CONNECTOR_TP_UNSUPPORTED',
        'ExampleConnector supports tensor_parallel_size 1 only (every rank would write the same files)',
        {
          field: 'tensor_parallel_size',
          hint: 'Use --tensor-parallel-size 1 with ExampleConnector, or OffloadingConnector for sharded engines.',
        },
      );
    }
    this.config = parseExampleConfig(this.kvTransferConfig.kv_connector_extra_config);
    this.layout = new StorageLayout(this.config.sharedStoragePath);
    this.blockSize = kvCacheConfig.groups[0]?.spec.blockSize ?? engineConfig.cache.blockSize;
    this.layoutTag = layoutTag(engineConfig.model.model, engineConfig.cache.cacheDtype, this.blockSize);
    this.#state = new ExampleScheduler(this.blockSize);
  }

  /** The stored prefix of a prompt: its token count and its folder key. */
  storedPrefix(request: Pick<ConnectorRequest, 'promptTokenIds' | 'cacheSalt'>): {
    numTokens: number;
    key: string;
  } {
    const numTokens = storedTokenCount(request.promptTokenIds.length, this.blockSize);
    return {
      numTokens,
      key: promptKey(request.promptTokenIds.slice(0, numTokens), this.layoutTag, request.cacheSalt),
    };
  }

  // ---- scheduler side ----

  getNumNewMatchedTokens(request: ConnectorRequest, numComputedTokens: number): MatchedTokens {
    if (!this.kvTransferConfig.isKvConsumer) return { count: 0, loadAsync: false };
    const { numTokens, key } = this.storedPrefix(request);
    if (numTokens <= numComputedTokens || !this.layout.has(key)) return { count: 0, loadAsync: false };
    return { count: numTokens - numComputedTokens, loadAsync: false };
  }

  updateStateAfterAlloc(request: ConnectorRequest, _blocks: KVCacheBlocks, numExternalTokens: number): void {
    const { numTokens, key } = this.storedPrefix(request);
    if (numExternalTokens > 0) {
      const firstBlock = (numTokens - numExternalTokens) / this.blockSize;
      this.#state.planLoad(request.requestId, key, firstBlock, numTokens / this.blockSize);
      return;
    }
    if (this.kvTransferConfig.isKvProducer && numTokens > 0 && !this.layout.has(key)) {
      this.#state.planSave(request.requestId, key, numTokens / this.blockSize);
    }
  }

  buildConnectorMeta(schedulerOutput: SchedulerOutput): ExampleConnectorMetadata {
    return this.#state.build(schedulerOutput);
  }

  override requestFinished(request: ConnectorRequest, blockIds: number[][]): RequestFinishedResult {
    this.#state.forget(request.requestId);
    return super.requestFinished(request, blockIds);
  }

  /** Requests with a pending load or save (for tests: 0 once every request finished). */
  get numTrackedRequests(): number {
    return this.#state.numTracked;
  }

  // ---- worker side ----

  override registerKvCaches(memory: PagedKVMemory): void {
    this.#io = new ExampleWorker(this.layout, memory, this.engineConfig.model.model);
  }

  #requireIO(): ExampleWorker {
    if (!this.#io) {
      throw new KVError(
        'KV_CONNECTOR_NOT_REGISTERED_MEMORY',
        'ExampleConnector has no KV memory registered',
        {
          hint: 'The model runner calls registerKvCaches once before the first step.',
        },
      );
    }
    return this.#io;
  }

  #metadata(): ExampleConnectorMetadata {
    const meta = this.getConnectorMetadata<Partial<ExampleConnectorMetadata>>();
    return { ...emptyExampleMetadata(), ...meta };
  }

  startLoadKv(_ctx: ForwardContext): void {
    const loads = this.#metadata().loads;
    if (loads.length === 0) return;
    const io = this.#requireIO();
    for (const job of loads) io.load(job);
  }

  waitForLayerLoad(_layerName: string): void {}

  saveKvLayer(layerName: string, _ctx: ForwardContext): void {
    const saves = this.#metadata().saves;
    if (saves.length === 0) return;
    const io = this.#requireIO();
    for (const job of saves) io.saveLayer(job, layerName);
  }

  waitForSave(): void {
    this.#io?.finishSaves();
  }

  override getBlockIdsWithLoadErrors(): number[] {
    return this.#io?.takeLoadErrors() ?? [];
  }

  override getKvConnectorStats(): KVConnectorStatsData | null {
    const stats = this.#io ? exampleStats(this.#io.takeCounters()) : null;
    return stats ? { ...stats } : null;
  }

  override shutdown(): void {
    this.#io?.discardStaged();
  }
}
