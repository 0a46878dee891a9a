/**
 * The continuous-batching scheduler with every connector hook in vLLM v1's order
 * (docs/scheduler.md). One step is `schedule()` → the model runner → `updateFromOutput()`.
 */

import type { EngineConfig } from '../../config/types.ts';
import type { KVConnectorBase } from '../../connector/base.ts';
import type {
  KVConnectorOutput,
  KVTransferParams,
  RequestStatus,
  SchedulerOutput,
} from '../../connector/types.ts';
import { KVError } from '../../errors/kv-error.ts';
import type { KVCacheEvent, KVCacheManager } from '../../kv/interfaces.ts';
import { getLogger } from '../../logging/logger.ts';
import { wallClockMs } from '../iteration-stats.ts';
import { isFinishedStatus, type Request } from '../request.ts';
import { transition } from '../request-lifecycle.ts';
import type { ModelRunnerOutput } from '../runner-io.ts';
import { admitWaiting } from './admission.ts';
import { SchedulerCore } from './core.ts';
import { handleInvalidBlocks } from './invalid-blocks.ts';
import { scheduleRunning } from './running.ts';
import { buildSchedulerOutput, newStepPlan, type StepPlan } from './step-plan.ts';
import { processSampledTokens } from './token-processing.ts';
import type {
  EngineCoreOutput,
  ResolvedSchedulerOptions,
  SchedulerOptions,
  SchedulerStats,
  SchedulerUpdate,
} from './types.ts';

const log = getLogger('kvconnect.engine.scheduler.scheduler');

export const KV_LOAD_FAILED = 'KV_LOAD_FAILED';

export interface PrefixCacheReset {
  resetRunningRequests?: boolean;
  resetConnector?: boolean;
}

export class Scheduler {
  readonly core: SchedulerCore;

  constructor(
    engineConfig: EngineConfig,
    kvCacheManager: KVCacheManager,
    connector: KVConnectorBase | null,
    options: SchedulerOptions = {},
  ) {
    const resolved: ResolvedSchedulerOptions = {
      blockSize: options.blockSize ?? kvCacheManager.blockSize,
      maxModelLen: options.maxModelLen ?? engineConfig.model.maxModelLen,
      maxNumSeqs: engineConfig.scheduler.maxNumSeqs,
      maxNumBatchedTokens: engineConfig.scheduler.maxNumBatchedTokens,
      enableChunkedPrefill: engineConfig.scheduler.enableChunkedPrefill,
      maxLoras: engineConfig.lora?.maxLoras ?? null,
      kvLoadFailurePolicy:
        options.kvLoadFailurePolicy ?? engineConfig.kvTransferConfig?.kv_load_failure_policy ?? 'fail',
      abortedLoadReclaimMs: options.abortedLoadReclaimMs ?? null,
      clock: options.clock ?? Date.now,
    };
    this.core = new SchedulerCore(kvCacheManager, connector, resolved);
  }

  get options(): ResolvedSchedulerOptions {
    return this.core.options;
  }

  get connector(): KVConnectorBase | null {
    return this.core.connector;
  }

  get kvCacheManager(): KVCacheManager {
    return this.core.kv;
  }

  getRequest(requestId: string): Request | undefined {
    return this.core.requests.get(requestId);
  }

  /** See SchedulerCore.kvTransferParamsAhead. */
  kvTransferParamsAhead(req: Request): KVTransferParams | null {
    return this.core.kvTransferParamsAhead(req);
  }

  addRequest(req: Request): void {
    const core = this.core;
    if (core.requests.has(req.requestId)) {
      throw new KVError('KV_REQUEST_DUPLICATE', `Request id ${req.requestId} is already in the scheduler`, {
        hint: 'Request ids must be unique among live requests; add a random suffix per request.',
      });
    }
    if (req.numPromptTokens === 0 || req.numPromptTokens > core.options.maxModelLen) {
      throw new KVError(
        'KV_REQUEST_INVALID_LENGTH',
        `The decoder prompt (length ${req.numPromptTokens}) must be between 1 and the maximum model length of ${core.options.maxModelLen}.`,
        { hint: 'Shorten the prompt or raise max_model_len.' },
      );
    }
    if (req.kvTransferParams && !core.connector) {
      log.warn('Got kv_transfer_params, but no KVConnector found. Disabling KVTransfer for this request.');
    }
    core.requests.set(req.requestId, req);
    core.waiting.push(req);
    core.connector?.onNewRequest(req);
  }

  schedule(): SchedulerOutput {
    const core = this.core;
    this.#reclaimExpiredLoads();
    const plan = newStepPlan(core.options.maxNumBatchedTokens);
    scheduleRunning(core, plan);
    // vLLM admits nothing in a step that had to preempt.
    if (plan.preempted.length === 0) admitWaiting(core, plan);
    const output = this.#output(plan);
    this.#advanceComputedTokens(plan.numScheduledTokens);
    return output;
  }

  /**
   * A step that schedules no tokens: it only carries the ids finished since the last step and
   * the connector's staged metadata to the workers (the hand-off of requests that just
   * finished, KVConnectorBase.hasHandoffMetadata).
   */
  scheduleConnectorOnly(): SchedulerOutput {
    return this.#output(newStepPlan(0));
  }

  #output(plan: StepPlan): SchedulerOutput {
    const core = this.core;
    const output = buildSchedulerOutput(plan, core.kv, [...core.finishedReqIds], [...core.preemptedReqIds]);
    core.finishedReqIds = new Set();
    core.preemptedReqIds = new Set();
    if (core.connector) output.kvConnectorMetadata = core.connector.buildConnectorMeta(output);
    return output;
  }

  #advanceComputedTokens(numScheduledTokens: Readonly<Record<string, number>>): void {
    const now = this.core.now();
    for (const [id, n] of Object.entries(numScheduledTokens)) {
      const req = this.core.requests.get(id);
      if (!req) continue;
      const start = req.numComputedTokens;
      const promptPart = Math.max(0, Math.min(req.numPromptTokens, start + n) - start);
      req.metrics.numLocalComputedTokens += promptPart;
      this.core.counters.promptTokensTotal += promptPart;
      if (req.firstScheduledAt === null) {
        req.firstScheduledAt = now;
        req.metrics.scheduledAt = now;
        req.metrics.queuedMs = now - req.arrivalTime;
        req.metrics.numCachedTokens = start;
        if (req.metrics.milestones) req.metrics.milestones.scheduledAt = wallClockMs();
      }
      req.numComputedTokens = start + n;
    }
  }

  updateFromOutput(schedulerOutput: SchedulerOutput, runnerOutput: ModelRunnerOutput): SchedulerUpdate {
    const core = this.core;
    const outputs: EngineCoreOutput[] = [];
    const kvOutput = runnerOutput.kvConnectorOutput;
    let failed = new Set<string>();
    if (kvOutput && kvOutput.invalidBlockIds.length > 0) {
      failed = handleInvalidBlocks(
        core,
        new Set(kvOutput.invalidBlockIds),
        schedulerOutput.numScheduledTokens,
      );
      if (core.options.kvLoadFailurePolicy === 'fail') {
        for (const id of failed) outputs.push(...this.#failRequest(id));
      }
    }
    outputs.push(...processSampledTokens(core, schedulerOutput, runnerOutput, failed));
    if (kvOutput) this.#updateFromKvXferFinished(kvOutput);

    const kvCacheEvents: KVCacheEvent[] = [
      ...core.kv.takeEvents(),
      ...(kvOutput?.kvCacheEvents ?? []),
      ...(core.connector?.takeEvents() ?? []),
    ];
    const schedulerStats = core.connector?.getKvConnectorStats() ?? null;
    const workerStats = kvOutput?.kvConnectorStats ?? null;
    const kvConnectorStats =
      workerStats || schedulerStats ? { ...(workerStats ?? {}), ...(schedulerStats ?? {}) } : null;
    return { outputs, kvCacheEvents, kvConnectorStats };
  }

  #failRequest(requestId: string): EngineCoreOutput[] {
    const req = this.core.requests.get(requestId);
    if (!req || req.isFinished) return [];
    req.error = {
      code: KV_LOAD_FAILED,
      message: `KV cache load failed for request ${requestId} (kv_load_failure_policy=fail)`,
      hint: "Retry the request, or set kv_load_failure_policy to 'recompute' to recompute the missing KV locally.",
    };
    return this.finishRequests([requestId], 'FINISHED_ERROR');
  }

  /** vLLM's _update_from_kv_xfer_finished. */
  #updateFromKvXferFinished(output: KVConnectorOutput): void {
    const core = this.core;
    core.connector?.updateConnectorOutput(output);
    for (const id of output.finishedRecving ?? []) {
      const req = core.requests.get(id);
      if (!req) {
        log.warn('finished_recving for unknown request %s ignored', id);
      } else if (req.status === 'WAITING_FOR_REMOTE_KVS') {
        core.finishedRecving.add(id);
        if (req.lifecycle === 'WAITING_FOR_REMOTE_KV') transition(req, 'LOADED');
        if (req.metrics.milestones) req.metrics.milestones.kvLoadFinishedAt = wallClockMs();
      } else if (req.lifecycle === 'HANDOFF_PENDING') {
        core.completeHandoff(req, 'recv');
      } else {
        log.warn('finished_recving for request %s in state %s ignored', id, req.lifecycle);
      }
    }
    for (const id of output.finishedSending ?? []) {
      const req = core.requests.get(id);
      if (req?.lifecycle === 'HANDOFF_PENDING') core.completeHandoff(req, 'send');
      else log.warn('finished_sending for request %s (%s) ignored', id, req?.lifecycle ?? 'unknown');
    }
  }

  /**
   * Aborts and other external finishes. A request whose blocks may still be receiving a
   * remote write keeps them until finished_recving
   * (docs/scheduler.md#delayed-free-and-aborts). Returns a final output per request it
   * finished.
   */
  finishRequests(requestIds: Iterable<string>, status: RequestStatus): EngineCoreOutput[] {
    if (!isFinishedStatus(status)) {
      throw new KVError(
        'KV_INVALID_FINISH_STATUS',
        `finishRequests needs a FINISHED_* status, got ${status}`,
        {
          hint: "Use 'FINISHED_ABORTED' for aborts.",
        },
      );
    }
    const core = this.core;
    const outputs: EngineCoreOutput[] = [];
    for (const id of requestIds) {
      const req = core.requests.get(id);
      if (!req || req.isFinished) continue;
      const holdForRecv = req.status === 'WAITING_FOR_REMOTE_KVS' && !core.finishedRecving.has(id);
      core.removeFromQueues(req);
      req.status = status;
      const params = core.finishRequest(req, holdForRecv);
      outputs.push(core.makeOutput(req, [], params));
    }
    return outputs;
  }

  /** Beyond vLLM (#46283): reclaim blocks of aborted loads whose finished_recving never came. */
  #reclaimExpiredLoads(): void {
    const deadline = this.core.options.abortedLoadReclaimMs;
    if (deadline === null) return;
    const now = this.core.now();
    for (const req of [...this.core.requests.values()]) {
      const pending = req.pendingHandoff;
      if (pending?.recv && now - pending.since >= deadline) {
        log.warn(
          'Reclaiming KV blocks of %s: no finished_recving within %d ms after the abort',
          req.requestId,
          deadline,
        );
        this.core.completeHandoff(req, 'recv');
      }
    }
  }

  /** Live requests, hand-offs still holding blocks, or connector transfers in flight. */
  hasRequests(): boolean {
    const core = this.core;
    return (
      core.requests.size > 0 ||
      core.finishedReqIds.size > 0 ||
      (core.connector?.hasPendingPushWork() ?? false)
    );
  }

  hasUnfinishedRequests(): boolean {
    return this.core.waiting.length + this.core.running.length > 0;
  }

  getNumUnfinishedRequests(): number {
    return this.core.waiting.length + this.core.running.length;
  }

  /**
   * vLLM's reset_prefix_cache: forgets every cached block hash, which only works while no
   * block is in use. `resetRunningRequests` first preempts the running requests (they are
   * recomputed later); `resetConnector` also clears the connector's external cache.
   */
  /** The KV cache events of the cache and the connector since the last step (outside a step). */
  takeKvCacheEvents(): KVCacheEvent[] {
    return [...this.core.kv.takeEvents(), ...(this.core.connector?.takeEvents() ?? [])];
  }

  resetPrefixCache(options: PrefixCacheReset = {}): boolean {
    const core = this.core;
    if (options.resetRunningRequests) {
      for (let victim = core.running.pop(); victim; victim = core.running.pop()) core.preempt(victim);
    }
    let ok = core.kv.resetPrefixCache();
    if (!ok) log.warn('Failed to reset the prefix cache: some KV blocks are still in use');
    if (options.resetConnector) ok = core.connector?.resetCache() !== false && ok;
    return ok;
  }

  stats(): SchedulerStats {
    const core = this.core;
    let handoff = 0;
    for (const req of core.requests.values()) if (req.lifecycle === 'HANDOFF_PENDING') handoff += 1;
    return {
      numRunningReqs: core.running.length,
      numWaitingReqs: core.waiting.length,
      numWaitingForLora: core.loraDeferred,
      numWaitingForRemoteKvs: core.waiting.filter((r) => r.status === 'WAITING_FOR_REMOTE_KVS').length,
      kvFetchByStage: kvFetchStages(core),
      numHandoffPending: handoff,
      kvCacheUsage: core.kv.usage,
      ...core.counters,
      ...this.loraAdapters(),
    };
  }

  /** Distinct adapter names of the running and waiting requests (vLLM's LoRA stats). */
  loraAdapters(): { runningLoraAdapters: string[]; waitingLoraAdapters: string[] } {
    return {
      runningLoraAdapters: adapterNames(this.core.running),
      waitingLoraAdapters: adapterNames(this.core.waiting),
    };
  }
}

function adapterNames(requests: readonly Request[]): string[] {
  const names = new Set<string>();
  for (const r of requests) if (r.loraRequest) names.add(r.loraRequest.loraName);
  return [...names];
}

/**
 * vLLM's vllm:num_requests_kv_fetch_by_stage: waiting requests that will fetch their KV from a
 * peer (not admitted yet), that are receiving it, and that received it and wait to run.
 */
function kvFetchStages(core: SchedulerCore): SchedulerStats['kvFetchByStage'] {
  const stages = { waiting_to_start: 0, in_progress: 0, completed_waiting: 0 };
  for (const r of core.waiting) {
    if (r.status === 'WAITING_FOR_REMOTE_KVS') {
      if (core.finishedRecving.has(r.requestId)) stages.completed_waiting++;
      else stages.in_progress++;
    } else if (r.kvTransferParams?.['do_remote_prefill'] === true) stages.waiting_to_start++;
  }
  return stages;
}
