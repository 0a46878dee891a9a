/**
 * The scheduler's state and the operations every phase shares: finishing a request (the
 * connector's requestFinished and the delayed free), freeing blocks, preemption. The
 * phases (running.ts, admission.ts, invalid-blocks.ts) and the public Scheduler use it.
 */
import type { KVConnectorBase, KVConnectorClass } from '../../connector/base.ts';
import type { KVTransferParams } from '../../connector/types.ts';
import { KVError } from '../../errors/kv-error.ts';
import type { KVCacheManager } from '../../kv/interfaces.ts';
import { getLogger } from '../../logging/logger.ts';
import type { Request } from '../request.ts';
import { transition } from '../request-lifecycle.ts';
import type { EngineCoreOutput, ResolvedSchedulerOptions, SchedulerStats } from './types.ts';

const log = getLogger('kvconnect.engine.scheduler.core');
const RECENTLY_FREED_LIMIT = 256;

type Counters = Pick<
  SchedulerStats,
  | 'prefixCacheQueries'
  | 'prefixCacheHits'
  | 'externalPrefixCacheQueries'
  | 'externalPrefixCacheHits'
  | 'numPreemptions'
  | 'promptTokensTotal'
  | 'generationTokensTotal'
>;

export class SchedulerCore {
  readonly kv: KVCacheManager;
  readonly connector: KVConnectorBase | null;
  readonly options: ResolvedSchedulerOptions;
  /** Every request the scheduler owns: queued, running, or finished with a pending hand-off. */
  readonly requests = new Map<string, Request>();
  /** FCFS; preempted requests go back to the front. */
  waiting: Request[] = [];
  running: Request[] = [];
  /** Async loads in flight and prefills still in progress (their blocks are reserved). */
  readonly inflightPrefills = new Set<Request>();
  /** Waiting requests the last admission held back for --max-loras (vLLM's LoRA budget). */
  loraDeferred = 0;
  /** Async loads the workers reported done, not yet promoted. */
  readonly finishedRecving = new Set<string>();
  /** Async loads that failed under the recompute policy, not yet promoted. */
  readonly failedRecving = new Set<string>();
  /** Finished since the last schedule() (sent to the workers in the next output). */
  finishedReqIds = new Set<string>();
  preemptedReqIds = new Set<string>();
  /** The last freed requests, for the lifecycle invariants. */
  readonly recentlyFreed: Request[] = [];
  readonly counters: Counters = {
    prefixCacheQueries: 0,
    prefixCacheHits: 0,
    externalPrefixCacheQueries: 0,
    externalPrefixCacheHits: 0,
    numPreemptions: 0,
    promptTokensTotal: 0,
    generationTokensTotal: 0,
  };

  constructor(kv: KVCacheManager, connector: KVConnectorBase | null, options: ResolvedSchedulerOptions) {
    this.kv = kv;
    this.connector = connector;
    this.options = options;
  }

  now(): number {
    return this.options.clock();
  }

  removeFromQueues(req: Request): void {
    this.waiting = this.waiting.filter((r) => r !== req);
    this.running = this.running.filter((r) => r !== req);
  }

  /**
   * vLLM's _free_request: the connector sees the request's blocks (requestFinished) before
   * they are freed; blocks are freed now unless the caller (`holdForRecv`) or the connector
   * asks for a delay. The request must already have its FINISHED_* status and be out of
   * the queues. Returns the connector's kv_transfer_params for the final output.
   */
  finishRequest(req: Request, holdForRecv: boolean): KVTransferParams | null {
    this.inflightPrefills.delete(req);
    this.finishedRecving.delete(req.requestId);
    this.failedRecving.delete(req.requestId);
    transition(req, 'FINISHED');
    const result = this.#connectorFinished(req);
    this.finishedReqIds.add(req.requestId);
    req.metrics.e2eMs = this.now() - req.arrivalTime;
    if (!holdForRecv && !result.delayFree) {
      this.freeBlocks(req);
    } else {
      req.pendingHandoff = { recv: holdForRecv, send: result.delayFree, since: this.now() };
      transition(req, 'HANDOFF_PENDING');
    }
    return result.kvTransferParams;
  }

  #connectorFinished(req: Request): { delayFree: boolean; kvTransferParams: KVTransferParams | null } {
    if (!this.connector) return { delayFree: false, kvTransferParams: null };
    this.kv.removeSkippedBlocks(req.requestId, req.numComputedTokens);
    const blockIds = this.#blockIdsForComputedTokens(req);
    const connectorClass = this.connector.constructor as KVConnectorClass;
    if (!connectorClass.supportsHMA && blockIds.length !== 1) {
      throw new KVError(
        'KV_CONNECTOR_HMA_REQUIRED',
        `Connector ${connectorClass.name} does not support HMA but the KV cache has ${blockIds.length} groups.`,
        {
          hint: 'Set `--disable-hybrid-kv-cache-manager`, or use a connector with static supportsHMA = true.',
        },
      );
    }
    req.handoffBlockIds = blockIds;
    const result = this.connector.requestFinished(req, blockIds);
    if (result.kvTransferParams) req.kvTransferParams = result.kvTransferParams;
    return result;
  }

  /**
   * Per group, clipped to the blocks that hold computed tokens
   * (docs/scheduler.md#connector-calls-per-step).
   */
  #blockIdsForComputedTokens(req: Request): number[][] {
    const groups = this.kv.kvCacheConfig.groups;
    return this.kv.getBlockIds(req.requestId).map((ids, g) => {
      const groupBlockSize = groups[g]?.spec.blockSize ?? this.options.blockSize;
      return ids.slice(0, Math.ceil(req.numComputedTokens / groupBlockSize));
    });
  }

  /**
   * The connector's kv_transfer_params for `req` ahead of the step just scheduled (schedule()
   * already counted its tokens as computed), which completes its prompt and samples the token
   * that finishes it (docs/connector-api.md#params-ahead); null when the step does not end the
   * request, or the KV cache has sliding windows (their blocks are trimmed only at the
   * finish), or the connector cannot tell.
   */
  kvTransferParamsAhead(req: Request): KVTransferParams | null {
    const connector = this.connector;
    if (!connector) return null;
    if (req.numComputedTokens < req.numPromptTokens || req.numOutputTokens + 1 < req.maxTokens) return null;
    if (this.kv.kvCacheConfig.groups.some((g) => g.spec.slidingWindow !== null)) return null;
    return connector.kvTransferParamsAhead(req, this.#blockIdsForComputedTokens(req));
  }

  /** Returns the blocks to the pool and forgets the request (vLLM's _free_blocks). */
  freeBlocks(req: Request): void {
    this.kv.free(req.requestId);
    this.requests.delete(req.requestId);
    req.pendingHandoff = null;
    transition(req, 'FREED');
    this.recentlyFreed.push(req);
    if (this.recentlyFreed.length > RECENTLY_FREED_LIMIT) this.recentlyFreed.shift();
  }

  /** A hand-off finished on the workers' side (finished_recving / finished_sending). */
  completeHandoff(req: Request, side: 'recv' | 'send'): void {
    const pending = req.pendingHandoff;
    if (!pending) return;
    pending[side] = false;
    if (!pending.recv && !pending.send) this.freeBlocks(req);
  }

  /** Recompute preemption: blocks back to the pool, request back to the front of the queue. */
  preempt(req: Request): void {
    this.kv.free(req.requestId);
    this.inflightPrefills.delete(req);
    req.status = 'PREEMPTED';
    req.numComputedTokens = 0;
    req.numPreemptions += 1;
    transition(req, 'PREEMPTED');
    this.waiting.unshift(req);
    this.preemptedReqIds.add(req.requestId);
    this.counters.numPreemptions += 1;
    log.debug('preempted %s (preemptions: %d)', req.requestId, req.numPreemptions);
  }

  /** Blocks in-flight prefills still need to hold their whole prompt (vLLM's reservation). */
  inflightReservedBlocks(): number {
    let reserved = 0;
    for (const req of this.inflightPrefills) {
      const fullTokens = Math.min(req.numTokens, this.options.maxModelLen);
      const held = this.kv
        .getBlockIds(req.requestId)
        .reduce((n, ids) => n + ids.filter((id) => id !== 0).length, 0);
      reserved += Math.max(0, this.kv.numBlocksNeeded(fullTokens) - held);
    }
    return reserved;
  }

  makeOutput(
    req: Request,
    newTokenIds: number[],
    kvTransferParams: KVTransferParams | null,
  ): EngineCoreOutput {
    const output: EngineCoreOutput = {
      requestId: req.requestId,
      newTokenIds,
      logprobs: null,
      topLogprobs: null,
      finished: req.isFinished,
      finishReason: req.getFinishReason(),
      status: req.status,
      stopTokenId: req.stopTokenId,
      kvTransferParams,
      metrics: { ...req.metrics },
    };
    if (req.error) output.error = { ...req.error };
    return output;
  }
}
