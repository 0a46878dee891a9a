/**
 * DecodeBenchConnector (docs/connectors/decode-bench.md): benchmarks a decode instance
 * without a prefill instance. Each request reports all but its last token as external, once,
 * and the worker fills those blocks (every KV cache group) with synthetic values in the same
 * step, so only the last prompt token is computed and decoding starts at once.
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
import { BlockFiller } from './block-filler.ts';
import { DECODE_BENCH_EXTRA_CONFIG, type DecodeBenchConfig, parseDecodeBenchConfig } from './config.ts';

/** Blocks to fill for one request, one list per KV cache group. */
export interface DecodeBenchFill {
  reqId: string;
  blockIds: number[][];
}

export interface DecodeBenchMetadata {
  [key: string]: unknown;
  fills: DecodeBenchFill[];
}

export class DecodeBenchConnector extends KVConnectorBase {
  static override supportsHMA = true;

  static override extraConfigSchema: ExtraConfigSchema = DECODE_BENCH_EXTRA_CONFIG;

  static override validateExtraConfig(extra: Record<string, unknown>): DecodeBenchConfig {
    return parseDecodeBenchConfig(extra);
  }

  readonly config: DecodeBenchConfig;
  /** Requests already given their synthetic KV (scheduler side); cleared when they finish. */
  private readonly filled = new Set<string>();
  private pending: DecodeBenchFill[] = [];
  private filler: BlockFiller | null = null;
  private filledBlocks = 0;

  constructor(engineConfig: EngineConfig, role: KVConnectorRole, kvCacheConfig: KVCacheConfig) {
    super(engineConfig, role, kvCacheConfig);
    this.config = parseDecodeBenchConfig(this.kvTransferConfig.kv_connector_extra_config);
  }

  // ---- scheduler side ----

  getNumNewMatchedTokens(request: ConnectorRequest, numComputedTokens: number): MatchedTokens {
    if (this.filled.has(request.requestId)) return { count: 0, loadAsync: false };
    return { count: Math.max(0, request.numTokens - numComputedTokens - 1), loadAsync: false };
  }

  updateStateAfterAlloc(request: ConnectorRequest, blocks: KVCacheBlocks, numExternalTokens: number): void {
    if (numExternalTokens <= 0) return;
    const numLocal = request.numTokens - 1 - numExternalTokens;
    const end = numLocal + numExternalTokens;
    const ids = blocks.getBlockIds();
    const perGroup = this.kvCacheConfig.groups.map((group, g) => {
      const bs = group.spec.blockSize;
      const groupIds = ids[g] ?? [];
      return groupIds.slice(Math.floor(numLocal / bs), Math.ceil(end / bs)).filter((id) => id !== 0);
    });
    this.pending.push({ reqId: request.requestId, blockIds: perGroup });
    this.filled.add(request.requestId);
  }

  buildConnectorMeta(_schedulerOutput: SchedulerOutput): DecodeBenchMetadata {
    const fills = this.pending;
    this.pending = [];
    return { fills };
  }

  override requestFinished(request: ConnectorRequest, blockIds: number[][]): RequestFinishedResult {
    this.filled.delete(request.requestId);
    return super.requestFinished(request, blockIds);
  }

  /** Requests currently marked as filled (for tests: 0 once every request finished). */
  get numFilledRequests(): number {
    return this.filled.size;
  }

  // ---- worker side ----

  override registerKvCaches(memory: PagedKVMemory): void {
    this.filler = new BlockFiller(
      memory,
      this.config.fillMean,
      this.config.fillStd,
      this.engineConfig.model.seed,
    );
  }

  startLoadKv(_ctx: ForwardContext): void {
    const fills = this.getConnectorMetadata<Partial<DecodeBenchMetadata>>().fills ?? [];
    if (fills.length === 0 || !this.filler) return;
    for (const fill of fills) {
      fill.blockIds.forEach((ids, g) => {
        for (const layer of this.kvCacheConfig.groups[g]?.layerNames ?? []) {
          for (const id of ids) this.filler?.fill(layer, id);
        }
        this.filledBlocks += ids.length;
      });
    }
  }

  waitForLayerLoad(_layerName: string): void {}

  saveKvLayer(_layerName: string, _ctx: ForwardContext): void {}

  waitForSave(): void {}

  override getKvConnectorStats(): KVConnectorStatsData | null {
    if (this.filledBlocks === 0) return null;
    const stats = { num_filled_blocks: this.filledBlocks };
    this.filledBlocks = 0;
    return stats;
  }
}
