/**
 * The engine: one scheduler, one executor (model runner per tensor-parallel rank), one
 * output processor. `step()` = schedule → execute → update → detokenize, as in nano-vllm.
 */
import type { EmulationConfig } from '../config/emulation-config.ts';
import { buildEngineConfig, type EngineOptionsInput } from '../config/engine-config.ts';
import type { KvLoadFaultConfig } from '../config/fault-injection.ts';
import { warnKVEventsConfig } from '../config/kv-events-config.ts';
import { resolveModelInfo } from '../config/model-info.ts';
import type { EngineConfig } from '../config/types.ts';
import type { KVConnectorBase, KVConnectorClass } from '../connector/base.ts';
import { KVConnectorFactory } from '../connector/factory.ts';
import { applyHMADecision, type HMADecision, resolveHybridKvCacheManager } from '../connector/hma.ts';
import type { ConnectorMetricSpec } from '../connector/metric-specs.ts';
import { mergeStats } from '../connector/stats.ts';
import type { KVConnectorStatsData, KVTransferParams, SchedulerOutput } from '../connector/types.ts';
import { KVError } from '../errors/kv-error.ts';
import { createBlockHasher } from '../kv/block-hasher.ts';
import type { KVCacheConfig } from '../kv/interfaces.ts';
import { buildKVCacheConfig } from '../kv/kv-cache-config.ts';
import { createKVCacheManager } from '../kv/kv-cache-manager.ts';
import { ZmqEventPublisher } from '../kv-events/publisher.ts';
import { getLogger } from '../logging/logger.ts';
import { loadTokenizer } from '../tokenizer/load.ts';
import type {
  GenerateRequest,
  KVEventsInfo,
  RequestOutputDelta,
  SamplingParams,
  TokenizerLike,
} from './api.ts';
import { type IterationStats, IterationStatsBuilder } from './iteration-stats.ts';
import { KVEventSink } from './kv-event-sink.ts';
import { KvLoadFaults } from './kv-load-faults.ts';
import type { LoRARequest } from './lora/lora-request.ts';
import { SyntheticModel } from './model/synthetic-model.ts';
import { type BlockHashSource, Request } from './request.ts';
import type { ModelExecutor } from './runner/executor.ts';
import { LocalExecutor } from './runner/local-executor.ts';
import { OutputProcessor } from './runner/output-processor.ts';
import { setUpRank } from './runner/rank-setup.ts';
import { SimulatedExecutor, type SimulatedExecutorOptions } from './runner/simulated-executor.ts';
import { ThreadExecutor } from './runner/thread-executor.ts';
import type { ModelRunnerOutput } from './runner-io.ts';
import { KVOutputAggregator } from './scheduler/kv-output-aggregator.ts';
import { type PrefixCacheReset, Scheduler } from './scheduler/scheduler.ts';
import type { EngineCoreOutput, SchedulerStats } from './scheduler/types.ts';
import { StructuredOutputBackend } from './structured/backend.ts';
import type { StructuredOutputsParams } from './structured/params.ts';
import {
  createEngineClock,
  createStepTimeModel,
  syntheticTokenSource,
  targetKvModelConfig,
  withTargetKv,
} from './timing/emulation.ts';
import type { EngineClock } from './timing/engine-clock.ts';
import { buildStepBatch, type StepTimeModel } from './timing/step-batch.ts';

const log = getLogger('kvconnect.engine.engine');

export interface StepResult {
  deltas: RequestOutputDelta[];
  /** Tokens the model computed this step (0 = an idle step: only transfers progressed). */
  numScheduledTokens: number;
  /** Requests whose KV load from a peer finished this step: the next step can schedule them. */
  numLoadsFinished: number;
}

export class Engine {
  readonly config: EngineConfig;
  readonly kvCacheConfig: KVCacheConfig;
  readonly hma: HMADecision;
  readonly tokenizer: TokenizerLike;
  readonly scheduler: Scheduler;
  readonly executor: ModelExecutor;
  /** The Prometheus metrics the connector's class declares for its stats ([] without a connector). */
  readonly connectorMetricSpecs: readonly ConnectorMetricSpec[];
  readonly #outputs: OutputProcessor;
  readonly #blockHasher: BlockHashSource;
  readonly #blockHashSize: number;
  /** Where each step's KV cache events go (published or dropped; never kept). */
  readonly kvEvents: KVEventSink;
  readonly #iterationStats: IterationStatsBuilder;
  /** The time metrics, timestamps and events read; holds emulated steps (./timing/). */
  readonly clock: EngineClock;
  #stepTime: StepTimeModel | null;
  /** Injected KV-load failures and stalls (null: none configured yet). */
  #kvLoadFaults: KvLoadFaults | null;
  /** Requests that arrived with do_remote_prefill and have not sampled yet. */
  readonly #remotePrefill = new Set<string>();
  /** Requests whose kv_transfer_params are wanted ahead (GenerateRequest.onKvTransferParamsAhead). */
  readonly #paramsAhead = new Map<string, (params: KVTransferParams) => void>();
  /** Requests of the last held step: a step with one of them continues it (EngineClock). */
  #lastHeldReqs = new Set<string>();
  readonly #iterationListeners = new Set<(stats: IterationStats) => void>();
  #connectorStats: Record<string, unknown> | null = null;
  #closed = false;
  readonly #structured: StructuredOutputBackend | null;

  private constructor(parts: {
    config: EngineConfig;
    kvCacheConfig: KVCacheConfig;
    hma: HMADecision;
    tokenizer: TokenizerLike;
    scheduler: Scheduler;
    executor: ModelExecutor;
    blockHashSize: number;
    kvEvents: KVEventSink;
    connectorMetricSpecs: readonly ConnectorMetricSpec[];
    clock: EngineClock;
    structured: StructuredOutputBackend | null;
  }) {
    this.#structured = parts.structured;
    this.config = parts.config;
    this.kvCacheConfig = parts.kvCacheConfig;
    this.hma = parts.hma;
    this.tokenizer = parts.tokenizer;
    this.scheduler = parts.scheduler;
    this.executor = parts.executor;
    this.kvEvents = parts.kvEvents;
    this.connectorMetricSpecs = parts.connectorMetricSpecs;
    this.clock = parts.clock;
    this.#stepTime = createStepTimeModel(parts.config.emulation);
    const faults = parts.config.kvLoadFaults;
    this.#kvLoadFaults = faults ? new KvLoadFaults(faults, parts.config.model.seed) : null;
    this.#iterationStats = new IterationStatsBuilder(() => this.clock.now());
    this.#outputs = new OutputProcessor(parts.tokenizer);
    this.#blockHashSize = parts.blockHashSize;
    const hasher = createBlockHasher(parts.blockHashSize, parts.config.cache.prefixCachingHashAlgo);
    this.#blockHasher = (req) => hasher.newHashes(req);
  }

  /**
   * Engine options (vLLM names, see src/config/engine-options.ts) or a built EngineConfig.
   * `simulate` runs no model (./runner/simulated-executor.ts): for trace simulation.
   */
  static async create(
    input: EngineOptionsInput | EngineConfig = {},
    simulate: Omit<SimulatedExecutorOptions, 'lookup'> | null = null,
  ): Promise<Engine> {
    let config = isEngineConfig(input) ? input : buildEngineConfig(input);
    const model = resolveModelInfo(config.model.model);
    const hma = await resolveHybridKvCacheManager(config);
    config = applyHMADecision(config, hma);
    const tpSize = config.parallel.tensorParallelSize;
    // Emulating a target model without weights: KV blocks of its geometry, in BF16.
    const targetKv = config.emulation?.targetKv ?? null;
    if (targetKv) config = withTargetKv(config);
    const kvCacheConfig = buildKVCacheConfig({
      hfConfig: targetKv ? targetKvModelConfig(targetKv, model.hfConfig) : model.hfConfig,
      blockSize: config.cache.blockSize,
      dtype: config.cache.cacheDtype,
      numBlocks: config.cache.numGpuBlocks,
      memoryBytes: config.cache.kvCacheMemoryBytes,
      hybridEnabled: hma.enabled,
      tensorParallelSize: tpSize,
      maxModelLen: config.model.maxModelLen,
      maxNumBatchedTokens: config.scheduler.maxNumBatchedTokens,
    });
    const kvCacheManager = createKVCacheManager({
      kvCacheConfig,
      enablePrefixCaching: config.cache.enablePrefixCaching,
      maxModelLen: config.model.maxModelLen,
      hashAlgo: config.cache.prefixCachingHashAlgo,
      enableKvCacheEvents: config.kvEventsConfig?.enable_kv_cache_events ?? false,
    });
    warnKVEventsConfig(config.kvEventsConfig ?? null, config.cache.enablePrefixCaching);
    const tokenizer = loadTokenizer(config.model.model);
    const connector = config.kvTransferConfig
      ? await KVConnectorFactory.createConnector(config, 'scheduler', kvCacheConfig)
      : null;
    const clock = createEngineClock(config.emulation);
    const scheduler = new Scheduler(config, kvCacheManager, connector, { clock: () => clock.now() });
    // vLLM's KVOutputAggregator: a request is finished only when every rank reported it.
    const aggregator = connector ? new KVOutputAggregator(connector.getFinishedCount() ?? tpSize) : null;
    let executor: ModelExecutor;
    // Compiles constraints before admission (400s); null when tokens come without a model.
    let structured: StructuredOutputBackend | null = null;
    try {
      const lookup = (id: string): Request | undefined => scheduler.getRequest(id);
      const nextToken = syntheticTokenSource(config, tokenizer, lookup);
      if (simulate || (nextToken && !targetKv)) {
        executor = new SimulatedExecutor({ ...simulate, lookup, ...(nextToken ? { nextToken } : {}) });
      } else if (nextToken) {
        const synthetic = { model: new SyntheticModel(kvCacheConfig, tokenizer.vocabSize), nextToken };
        const rank = await setUpRank(config, kvCacheConfig, 0, 1, undefined, synthetic);
        executor = new LocalExecutor(rank.runner, rank.handshake, aggregator);
      } else if (tpSize === 1) {
        const rank = await setUpRank(config, kvCacheConfig, 0, 1, undefined, undefined, tokenizer);
        executor = new LocalExecutor(rank.runner, rank.handshake, aggregator);
        structured = rank.runner.structured;
      } else {
        executor = await ThreadExecutor.start(config, kvCacheConfig, aggregator);
        structured = new StructuredOutputBackend(
          () => tokenizer,
          Math.max(tokenizer.vocabSize, model.hfConfig.vocab_size),
        );
      }
    } catch (e) {
      await connector?.shutdown();
      throw e;
    }
    // docs/connector-api.md#handshake-metadata: the scheduler-side connector serves every
    // rank's handshake metadata.
    if (connector && Object.keys(executor.handshakeMetadata).length > 0) {
      try {
        await connector.setXferHandshakeMetadata(executor.handshakeMetadata);
      } catch (e) {
        await executor.shutdown();
        await connector.shutdown();
        throw e;
      }
    }
    let kvEvents: KVEventSink;
    let connectorMetricSpecs: readonly ConnectorMetricSpec[] = [];
    try {
      // vLLM's build_prom_metrics: the resolved class declares what its stats feed.
      if (connector && config.kvTransferConfig) {
        const cls = connector.constructor as KVConnectorClass;
        connectorMetricSpecs = (await cls.metricSpecs?.(config.kvTransferConfig)) ?? [];
      }
      kvEvents = await KVEventSink.create(config, kvCacheConfig, () => clock.now());
    } catch (e) {
      await executor.shutdown();
      await connector?.shutdown();
      throw e;
    }
    return new Engine({
      kvEvents,
      config,
      kvCacheConfig,
      hma,
      tokenizer,
      scheduler,
      clock,
      executor,
      blockHashSize: kvCacheManager.hashBlockSize,
      structured,
      connectorMetricSpecs,
    });
  }

  get connector(): KVConnectorBase | null {
    return this.scheduler.connector;
  }

  /** Tokenizes the prompt when needed and queues the request. */
  addRequest(req: GenerateRequest, arrivalTime = this.clock.now()): Request {
    this.#assertOpen();
    const promptTokenIds =
      req.promptTokenIds ?? (req.prompt !== undefined ? this.tokenizer.encode(req.prompt) : null);
    if (!promptTokenIds) {
      throw new KVError(
        'KV_REQUEST_INVALID',
        `Request ${req.requestId} has neither prompt nor promptTokenIds`,
        {
          hint: 'Pass a text prompt or a list of token ids.',
        },
      );
    }
    const request = new Request({
      requestId: req.requestId,
      promptTokenIds,
      sampling: { ...req.sampling, eosTokenId: this.tokenizer.eosTokenId },
      eosTokenId: this.tokenizer.eosTokenId,
      kvTransferParams: req.kvTransferParams ?? null,
      cacheSalt: req.cacheSalt,
      loraRequest: req.loraRequest ?? null,
      arrivalTime,
      blockHasher: this.#blockHasher,
      recordMilestones: req.recordMilestones === true,
    });
    this.scheduler.addRequest(request);
    if (this.#stepTime && req.kvTransferParams?.['do_remote_prefill'] === true)
      this.#remotePrefill.add(req.requestId);
    this.#outputs.addRequest(req.requestId, req.sampling);
    if (req.onKvTransferParamsAhead) this.#paramsAhead.set(req.requestId, req.onKvTransferParamsAhead);
    this.#iterationStats.addRequest(req.requestId, req.sampling.maxTokens);
    return request;
  }

  /** One engine step. */
  async step(): Promise<StepResult> {
    this.#assertOpen();
    const startedAt = this.clock.stepStart();
    const schedulerOutput = this.scheduler.schedule();
    if (this.#paramsAhead.size > 0) this.#sendParamsAhead(schedulerOutput);
    const { stepMs, continues } = this.#modelledStepMs(schedulerOutput);
    const runnerOutput = await this.executor.execute({
      schedulerOutput,
      ...this.#newRequestInputs(schedulerOutput),
    });
    // Emulated deployments: the step lasts what the step-time model says it would there.
    if (stepMs > 0) await this.clock.holdStep(startedAt, stepMs, continues);
    const update = this.#update(schedulerOutput, runnerOutput);
    let numLoadsFinished = update.numLoadsFinished;
    let stats = update.kvConnectorStats;
    const deltas = update.deltas;
    // A request that finished handed its blocks to the connector (a prefill server's): its
    // workers grant or push them in a connector-only step now, so the peer named in the
    // answer finds them ready (docs/connector-api.md#hand-off-in-the-same-step).
    if (this.scheduler.connector?.hasHandoffMetadata()) {
      const handoff = this.scheduler.scheduleConnectorOnly();
      const flushed = this.#update(
        handoff,
        await this.executor.execute({ schedulerOutput: handoff, newRequestSampling: {}, newRequestLora: {} }),
      );
      deltas.push(...flushed.deltas);
      numLoadsFinished += flushed.numLoadsFinished;
      if (flushed.kvConnectorStats) stats = mergeStats(stats ?? {}, flushed.kvConnectorStats);
    }
    this.#publishIteration('step', deltas, stats);
    return { deltas, numScheduledTokens: schedulerOutput.totalNumScheduledTokens, numLoadsFinished };
  }

  /** The scheduler takes the runner's output: the step's deltas, KV events and connector stats. */
  #update(
    schedulerOutput: SchedulerOutput,
    runnerOutput: ModelRunnerOutput,
  ): {
    deltas: RequestOutputDelta[];
    numLoadsFinished: number;
    kvConnectorStats: KVConnectorStatsData | null;
  } {
    if (this.#kvLoadFaults) {
      runnerOutput.kvConnectorOutput = this.#kvLoadFaults.apply(runnerOutput.kvConnectorOutput, (id) =>
        this.#loadedBlocks(id),
      );
    }
    const update = this.scheduler.updateFromOutput(schedulerOutput, runnerOutput);
    this.kvEvents.drain(update.kvCacheEvents);
    return {
      deltas: this.#toDeltas(update.outputs),
      numLoadsFinished: runnerOutput.kvConnectorOutput?.finishedRecving?.length ?? 0,
      kvConnectorStats: update.kvConnectorStats,
    };
  }

  /**
   * Every KV completion ends the loop's idle wait (the connector declares it,
   * KVConnectorBase.wakesEngineOnCompletion), and no injected stall is timed by the poll.
   */
  kvCompletionsWakeLoop(): boolean {
    return (this.scheduler.connector?.wakesEngineOnCompletion ?? false) && !this.#kvLoadFaults?.stalled;
  }

  /** Calls `wakeup` when a worker-side connector finished work between steps (ModelExecutor.setKvWakeup). */
  setKvWakeup(wakeup: () => void): void {
    this.executor.setKvWakeup?.(wakeup);
  }

  /**
   * Replaces the step-time model (POST /admin/config): the next step is timed by it. The
   * emulation config keeps its mode, speedup and clock.
   */
  setEmulation(emulation: EmulationConfig | null): void {
    this.#stepTime = createStepTimeModel(emulation);
  }

  /** Replaces the injected KV-load faults; loads already stalled keep their release time. */
  setKvLoadFaults(faults: KvLoadFaultConfig): void {
    if (this.#kvLoadFaults) this.#kvLoadFaults.config = faults;
    else this.#kvLoadFaults = new KvLoadFaults(faults, this.config.model.seed);
  }

  /** Block ids a request's remote load wrote: every group's blocks past its local prefix hit. */
  #loadedBlocks(reqId: string): number[] {
    const req = this.scheduler.getRequest(reqId);
    if (!req) return [];
    const out: number[] = [];
    this.scheduler.core.kv.getBlockIds(reqId).forEach((ids, g) => {
      const blockSize = this.kvCacheConfig.groups[g]?.spec.blockSize ?? this.config.cache.blockSize;
      const local = Math.floor(req.metrics.numLocalCachedTokens / blockSize);
      for (const id of ids.slice(local)) if (id !== 0) out.push(id);
    });
    return out;
  }

  /** Aborts requests (queued, running or loading); returns their final deltas. */
  abortRequests(requestIds: readonly string[]): RequestOutputDelta[] {
    const deltas = this.#toDeltas(this.scheduler.finishRequests(requestIds, 'FINISHED_ABORTED'));
    this.#publishIteration('abort', deltas, null);
    return deltas;
  }

  /** Calls `listener` with every iteration's stats; returns the unsubscribe function. */
  onIterationStats(listener: (stats: IterationStats) => void): () => void {
    this.#iterationListeners.add(listener);
    return () => this.#iterationListeners.delete(listener);
  }

  /**
   * Builds the iteration's stats and hands them to the listeners. The connector's stats of
   * the step travel with them; only while nobody listens do they pile up for
   * takeKvConnectorStats() (a listener that ignores them keeps memory flat).
   */
  #publishIteration(
    kind: IterationStats['kind'],
    deltas: readonly RequestOutputDelta[],
    connectorStats: Record<string, unknown> | null,
  ): void {
    const stats = this.#iterationStats.build(kind, deltas, connectorStats);
    if (this.config.lora) {
      const { runningLoraAdapters, waitingLoraAdapters } = this.scheduler.loraAdapters();
      stats.loraAdapters = { running: runningLoraAdapters, waiting: waitingLoraAdapters };
    }
    if (this.#iterationListeners.size === 0) {
      if (connectorStats) this.#connectorStats = mergeStats(this.#connectorStats ?? {}, connectorStats);
      return;
    }
    if (deltas.length === 0 && !connectorStats) return;
    for (const listener of this.#iterationListeners) listener(stats);
  }

  /** Live requests, or finished ones whose KV hand-off still holds blocks. */
  hasWork(): boolean {
    return this.scheduler.hasRequests();
  }

  /** See Scheduler.resetPrefixCache; call between steps. */
  resetPrefixCache(options: PrefixCacheReset = {}): boolean {
    this.#assertOpen();
    return this.scheduler.resetPrefixCache(options);
  }

  /** Publishes the KV events produced between steps (a prefix-cache reset while asleep) now. */
  flushKvEvents(): void {
    this.#assertOpen();
    this.kvEvents.drain(this.scheduler.takeKvCacheEvents());
  }

  schedulerStats(): SchedulerStats {
    return this.scheduler.stats();
  }

  /** Where KV cache events are published, or null when they are not. */
  kvEventsInfo(): KVEventsInfo | null {
    const pub = this.kvEvents.publisher;
    if (!(pub instanceof ZmqEventPublisher)) return null;
    return {
      endpoint: pub.endpoint,
      replay_endpoint: pub.replayEndpoint,
      topic: this.config.kvEventsConfig?.topic ?? '',
      block_size: this.#blockHashSize,
      prefix_caching_hash_algo: this.config.cache.prefixCachingHashAlgo,
    };
  }

  /**
   * Connector stats since the last call (numbers summed over steps), or null. While an
   * iteration listener is registered the stats go to it instead, step by step.
   */
  takeKvConnectorStats(): Record<string, unknown> | null {
    const stats = this.#connectorStats;
    this.#connectorStats = null;
    return stats;
  }

  /** Compiles a request's constraint before admission; a 400 KVError when it cannot be served. */
  async validateStructuredOutputs(params: StructuredOutputsParams): Promise<void> {
    if (!this.#structured)
      throw new KVError(
        'SERVER_INVALID_REQUEST',
        "Structured outputs need the model's logits; this engine generates tokens without a model (--mode random/echo or simulation).",
        {
          field: 'structured_outputs',
          hint: 'Serve a model with weights, or leave the structured-output fields out.',
        },
      );
    await this.#structured.compile(params);
  }

  async shutdown(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.executor.shutdown();
    await this.scheduler.connector?.shutdown();
    await this.kvEvents.shutdown();
  }

  /**
   * Before the forward pass: the requests this step finishes whose connector knows their
   * kv_transfer_params now get them (a prefill server answers its proxy with them ahead).
   * A request is asked once, at the step that completes its prompt.
   */
  #sendParamsAhead(out: SchedulerOutput): void {
    for (const [id, send] of this.#paramsAhead) {
      if (out.numScheduledTokens[id] === undefined) continue;
      const req = this.scheduler.getRequest(id);
      // schedule() counted the step's tokens as computed: a prompt still short has more chunks.
      if (req && req.numComputedTokens < req.numPromptTokens) continue;
      this.#paramsAhead.delete(id);
      const params = req ? this.scheduler.kvTransferParamsAhead(req) : null;
      if (params === null) continue;
      try {
        send(params);
      } catch (e) {
        log.warn('request %s: sending its kv_transfer_params ahead failed: %s', id, String(e));
      }
    }
  }

  #toDeltas(outputs: readonly EngineCoreOutput[]): RequestOutputDelta[] {
    const deltas: RequestOutputDelta[] = [];
    for (const out of outputs) {
      if (out.finished && this.#paramsAhead.size > 0) this.#paramsAhead.delete(out.requestId);
      if (!this.#outputs.has(out.requestId)) continue;
      const { delta, stopStringMatched } = this.#outputs.process(out);
      if (stopStringMatched) {
        // The stop string ends the request; its blocks go back now (vLLM aborts it in the core).
        const [final] = this.scheduler.finishRequests([out.requestId], 'FINISHED_STOPPED');
        if (final?.kvTransferParams) delta.kvTransferParams = final.kvTransferParams;
        if (final) delta.metrics = { ...final.metrics };
      }
      deltas.push(delta);
    }
    return deltas;
  }

  /**
   * The step's duration on the emulated deployment (0 without a step-time model), and whether
   * it continues the last held step (a request ran in both).
   */
  #modelledStepMs(out: SchedulerOutput): { stepMs: number; continues: boolean } {
    if (!this.#stepTime) return { stepMs: 0, continues: false };
    const batch = buildStepBatch(
      out,
      (id) => this.scheduler.getRequest(id),
      (id) => this.#remotePrefill.has(id),
      this.config.scheduler.maxNumSeqs,
    );
    for (const seq of batch.seqs) if (seq.firstToken || seq.decode) this.#remotePrefill.delete(seq.reqId);
    // Aborted or failed before their first token: forget them too.
    for (const id of this.#remotePrefill) if (!this.scheduler.getRequest(id)) this.#remotePrefill.delete(id);
    const stepMs = this.#stepTime.stepMs(batch);
    const continues = batch.seqs.some((seq) => this.#lastHeldReqs.has(seq.reqId));
    this.#lastHeldReqs = new Set(stepMs > 0 ? batch.seqs.map((seq) => seq.reqId) : []);
    return { stepMs, continues };
  }

  /** The sampling params and LoRA adapters of the requests the step schedules for the first time. */
  #newRequestInputs(out: SchedulerOutput): {
    newRequestSampling: Record<string, SamplingParams>;
    newRequestLora: Record<string, LoRARequest>;
  } {
    const newRequestSampling: Record<string, SamplingParams> = {};
    const newRequestLora: Record<string, LoRARequest> = {};
    for (const { reqId } of out.scheduledNewReqs) {
      const request = this.scheduler.getRequest(reqId);
      if (!request) continue;
      newRequestSampling[reqId] = request.sampling;
      if (request.loraRequest) newRequestLora[reqId] = request.loraRequest;
    }
    return { newRequestSampling, newRequestLora };
  }

  #assertOpen(): void {
    if (this.#closed) {
      throw new KVError('KV_ENGINE_CLOSED', 'The engine has been shut down', {
        hint: 'Create a new engine; shutdown() releases the model, the KV memory and the connector.',
      });
    }
  }
}

function isEngineConfig(input: EngineOptionsInput | EngineConfig): input is EngineConfig {
  return (
    typeof input === 'object' &&
    input !== null &&
    'cache' in input &&
    'scheduler' in input &&
    'parallel' in input
  );
}
