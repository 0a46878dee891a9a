/**
 * DecodeBenchConnector's scheduler side: every request reports all but its last token as
 * external, once, and its newly allocated blocks become the step's fill jobs.
 */
import type { ConnectorRequest, MatchedTokens } from '../../connector/types.ts';
import type { KVCacheBlocks, KVCacheConfig } from '../../kv/interfaces.ts';
import type { DecodeBenchFill, DecodeBenchMetadata } from './step-metadata.ts';

export class DecodeBenchScheduler {
  readonly #kvCacheConfig: KVCacheConfig;
  /** Requests already given their synthetic KV; cleared when they finish. */
  readonly #filled = new Set<string>();
  #pending: DecodeBenchFill[] = [];

  constructor(kvCacheConfig: KVCacheConfig) {
    this.#kvCacheConfig = kvCacheConfig;
  }

  getNumNewMatchedTokens(request: ConnectorRequest, numComputedTokens: number): MatchedTokens {
    if (this.#filled.has(request.requestId)) return { count: 0, loadAsync: false };
    return { count: Math.max(0, request.numTokens - numComputedTokens - 1), loadAsync: false };
  }

  updateStateAfterAlloc(request: ConnectorRequest, blocks: KVCacheBlocks, numExternalTokens: number): void {
    if (numExternalTokens <= 0) return;
    const numLocal = request.numTokens - 1 - numExternalTokens;
    const end = numLocal + numExternalTokens;
    const ids = blocks.getBlockIds();
    const perGroup = this.#kvCacheConfig.groups.map((group, g) => {
      const bs = group.spec.blockSize;
      const groupIds = ids[g] ?? [];
      return groupIds.slice(Math.floor(numLocal / bs), Math.ceil(end / bs)).filter((id) => id !== 0);
    });
    this.#pending.push({ reqId: request.requestId, blockIds: perGroup });
    this.#filled.add(request.requestId);
  }

  buildConnectorMeta(): DecodeBenchMetadata {
    const fills = this.#pending;
    this.#pending = [];
    return { fills };
  }

  requestFinished(reqId: string): void {
    this.#filled.delete(reqId);
  }

  /** Requests currently marked as filled. */
  get numFilled(): number {
    return this.#filled.size;
  }
}
