/**
 * MultiConnector's scheduler side, as vLLM combines its children: the first child with a hit
 * loads a request, every other child sees it with no external tokens; a request's
 * kv_transfer_params are the children's merged; when several children save a request
 * asynchronously, the workers are told how many extra "finished sending" reports to swallow.
 */
import type { KVConnectorBase, KVConnectorClass } from '../../connector/base.ts';
import type {
  ConnectorRequest,
  MatchedTokens,
  RequestFinishedResult,
  SchedulerOutput,
} from '../../connector/types.ts';
import { KVError } from '../../errors/kv-error.ts';
import type { KVCacheBlocks } from '../../kv/interfaces.ts';
import { allSupportHMA } from './children.ts';
import type { MultiConnectorMetadata } from './step-metadata.ts';
import { mergeTransferParams } from './transfer-params.ts';

export class MultiScheduler {
  /** Request → index of the child that loads it. */
  readonly #loader = new Map<string, number>();
  /** Countdowns to ship with the next metadata. */
  #extraAsyncSaves: Record<string, number> = {};

  /** First child with a hit wins; any child still looking up (null) makes the answer null. */
  getNumNewMatchedTokens(
    children: readonly KVConnectorBase[] | null,
    request: ConnectorRequest,
    numComputedTokens: number,
  ): MatchedTokens {
    if (!children) return { count: null, loadAsync: false };
    let result: MatchedTokens = { count: 0, loadAsync: false };
    let chosen = -1;
    for (const [i, child] of children.entries()) {
      const match = child.getNumNewMatchedTokens(request, numComputedTokens);
      if (match.count === null) return { count: null, loadAsync: false };
      if (chosen < 0 && match.count > 0) {
        chosen = i;
        result = match;
      }
    }
    if (chosen >= 0) this.#loader.set(request.requestId, chosen);
    else this.#loader.delete(request.requestId);
    return result;
  }

  /** The child that loads the request, if one had a hit. */
  loaderOf(children: readonly KVConnectorBase[] | null, request: ConnectorRequest): KVConnectorBase | null {
    const chosen = this.#loader.get(request.requestId);
    return chosen === undefined ? null : (children?.[chosen] ?? null);
  }

  /** The loading child gets the external count; every other child the real blocks with 0. */
  updateStateAfterAlloc(
    children: readonly KVConnectorBase[],
    request: ConnectorRequest,
    blocks: KVCacheBlocks,
    numExternalTokens: number,
  ): void {
    const chosen = this.#loader.get(request.requestId) ?? -1;
    for (const [i, child] of children.entries()) {
      child.updateStateAfterAlloc(request, blocks, i === chosen ? numExternalTokens : 0);
    }
  }

  buildConnectorMeta(
    children: readonly KVConnectorBase[] | null,
    schedulerOutput: SchedulerOutput,
  ): MultiConnectorMetadata {
    const extra = this.#extraAsyncSaves;
    this.#extraAsyncSaves = {};
    return {
      metadata: children ? children.map((c) => c.buildConnectorMeta(schedulerOutput)) : null,
      extraAsyncSaves: Object.keys(extra).length > 0 ? extra : null,
    };
  }

  /** Every child finishes the request (an HMA-less child sees group 0 only); their answers merged. */
  requestFinished(
    children: readonly KVConnectorBase[],
    classes: readonly KVConnectorClass[],
    request: ConnectorRequest,
    blockIds: number[][],
  ): RequestFinishedResult {
    if (blockIds.length > 1 && !allSupportHMA(classes)) {
      throw new KVError(
        'KV_MULTI_CONNECTOR_HMA',
        'HMA with multiple kv_cache_groups requires all sub-connectors to support HMA',
        { hint: 'Start with --disable-hybrid-kv-cache-manager, or use only children that support HMA.' },
      );
    }
    let asyncSaves = 0;
    const params = children.map((child, i) => {
      const ids = classes[i]?.supportsHMA ? blockIds : blockIds.slice(0, 1);
      const result = child.requestFinished(request, ids);
      if (result.delayFree) asyncSaves++;
      return result.kvTransferParams;
    });
    this.#loader.delete(request.requestId);
    if (asyncSaves > 1) this.#extraAsyncSaves[request.requestId] = asyncSaves - 1;
    return { delayFree: asyncSaves > 0, kvTransferParams: mergeTransferParams(params) };
  }
}
