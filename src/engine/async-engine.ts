/**
 * The engine behind the HTTP server: requests are added and aborted at any time and stream
 * their deltas. One background loop steps the engine while there is work, yielding to the
 * event loop between steps so sockets and transfers progress; when a step has nothing to
 * compute (requests waiting for remote KV, hand-offs pending) it waits a short timer
 * instead of spinning, cut short as soon as a request or an abort arrives. After a step
 * that finished every running request it briefly waits for the answered clients to come
 * back, so closed-loop clients keep sharing one batch. Aborts are applied between steps.
 * Sleep mode (sleep-mode.ts) stops the loop; requests that arrive while the engine pauses
 * or sleeps are held here and added when it wakes.
 */
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import type { EmulationConfig } from '../config/emulation-config.ts';
import type { EngineOptionsInput } from '../config/engine-config.ts';
import type { KvLoadFaultConfig } from '../config/fault-injection.ts';
import type { EngineConfig } from '../config/types.ts';
import type { ConnectorMetricSpec } from '../connector/metric-specs.ts';
import type { KVTransferParams } from '../connector/types.ts';
import { KVError } from '../errors/kv-error.ts';
import type {
  AsyncEngineLike,
  EngineStats,
  GenerateRequest,
  IterationStats,
  KVConnectorDescription,
  KVEventsInfo,
  RequestOutputDelta,
  StructuredOutputsParams,
  TokenizerLike,
} from './api.ts';
import { Engine } from './engine.ts';
import { checkLoraAdapter } from './lora/check-adapter.ts';
import type { LoRARequest } from './lora/lora-request.ts';
import { rejectedKvTransferRequest } from './sampling-params.ts';
import type { PrefixCacheReset } from './scheduler/scheduler.ts';
import {
  AWAKE,
  afterWake,
  type PauseMode,
  SLEEP_TAGS,
  type SleepLevel,
  type SleepState,
  type SleepTag,
} from './sleep-mode.ts';

/**
 * Wait between steps that computed nothing (ms): the poll that finds a load that landed when
 * the connector could not wake the loop (docs/connector-api.md#waking-the-engine).
 */
export const IDLE_STEP_INTERVAL_MS = 2;

/**
 * Wait between steps that computed nothing when the connector wakes the loop on every
 * completion (KVConnectorBase.wakesEngineOnCompletion), ms: what is left for the poll is only
 * time-driven work (lease expiry, heartbeats, reclaiming aborted loads), which tolerates this.
 */
export const WOKEN_IDLE_STEP_INTERVAL_MS = 50;

export interface AsyncEngineLoopOptions {
  /** The idle poll, ms (default IDLE_STEP_INTERVAL_MS). */
  idleStepIntervalMs?: number;
  /** The idle wait when every connector completion wakes the loop, ms (default WOKEN_IDLE_STEP_INTERVAL_MS). */
  wokenIdleStepIntervalMs?: number;
}
/** Longest wait for just-answered clients to send their next request, ms and share of a step. */
export const REFILL_WAIT_MAX_MS = 6;
export const REFILL_WAIT_STEP_SHARE = 0.25;

interface Stream {
  deltas: RequestOutputDelta[];
  wake: (() => void) | null;
  finished: boolean;
  error: Error | null;
}

export class AsyncEngine implements AsyncEngineLike {
  readonly engine: Engine;
  readonly #streams = new Map<string, Stream>();
  readonly #pendingAborts = new Set<string>();
  #pendingResets: Array<{ options: PrefixCacheReset; done: (ok: boolean) => void }> = [];
  #loop: Promise<void> | null = null;
  #closed = false;
  /** Requests added so far; a step that computed nothing skips its idle wait if this moved. */
  #arrivals = 0;
  /** Ends the current idle wait early (a request or an abort arrived). */
  #wakeLoop: (() => void) | null = null;
  /** The connector woke the loop since the current step began (work finished between steps). */
  #kvWoken = false;
  /** Requests finished by the last computing step, `arrivals` at its end, its duration (ms). */
  #lastFinished = 0;
  #arrivalsAtFinish = 0;
  #lastStepMs = 0;
  #sleep: SleepState = AWAKE;
  /** A sleep is waiting for in-flight requests to finish (pause mode "wait"). */
  #pausing = false;
  /** Requests that arrived while pausing or asleep, added to the engine on waking. */
  readonly #held = new Map<string, GenerateRequest>();
  readonly #idleStepIntervalMs: number;
  readonly #wokenIdleStepIntervalMs: number;

  constructor(engine: Engine, loop: AsyncEngineLoopOptions = {}) {
    this.engine = engine;
    this.#idleStepIntervalMs = loop.idleStepIntervalMs ?? IDLE_STEP_INTERVAL_MS;
    this.#wokenIdleStepIntervalMs = Math.max(
      this.#idleStepIntervalMs,
      loop.wokenIdleStepIntervalMs ?? WOKEN_IDLE_STEP_INTERVAL_MS,
    );
    // A load that lands (or a peer's notification) while the loop idles ends the wait at once.
    engine.setKvWakeup(() => {
      this.#kvWoken = true;
      this.#wakeLoop?.();
    });
  }

  static async create(
    options: EngineOptionsInput | EngineConfig = {},
    loop: AsyncEngineLoopOptions = {},
  ): Promise<AsyncEngine> {
    return new AsyncEngine(await Engine.create(options), loop);
  }

  get config(): EngineConfig {
    return this.engine.config;
  }

  get tokenizer(): TokenizerLike {
    return this.engine.tokenizer;
  }

  get numGpuBlocks(): number {
    return this.engine.kvCacheConfig.numBlocks;
  }

  /** Adds the request now (throws on invalid input) and returns its stream of deltas. */
  generate(request: GenerateRequest, signal?: AbortSignal): AsyncIterable<RequestOutputDelta> {
    if (this.#closed) throw closedError();
    if (this.#streams.has(request.requestId)) {
      throw new KVError('KV_REQUEST_DUPLICATE', `Request id ${request.requestId} is already running`, {
        hint: 'Use a unique request id per request.',
      });
    }
    const stream: Stream = { deltas: [], wake: null, finished: false, error: null };
    if (this.#pausing || this.#sleep.level > 0) {
      this.#streams.set(request.requestId, stream);
      this.#held.set(request.requestId, request);
      return this.#iterate(request.requestId, stream, signal);
    }
    this.engine.addRequest(request);
    this.#streams.set(request.requestId, stream);
    this.#arrivals++;
    this.#wakeLoop?.();
    this.#ensureLoop();
    return this.#iterate(request.requestId, stream, signal);
  }

  async *#iterate(
    requestId: string,
    stream: Stream,
    signal: AbortSignal | undefined,
  ): AsyncGenerator<RequestOutputDelta> {
    const onAbort = (): void => this.abort(requestId);
    if (signal?.aborted) onAbort();
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      while (true) {
        const delta = stream.deltas.shift();
        if (delta) {
          yield delta;
          if (delta.finished) return;
          continue;
        }
        if (stream.error) throw stream.error;
        await new Promise<void>((resolve) => {
          stream.wake = resolve;
        });
        stream.wake = null;
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
      // The consumer stopped early (client disconnect): free the request's blocks.
      if (!stream.finished) this.abort(requestId);
    }
  }

  setEmulation(emulation: EmulationConfig | null): void {
    this.engine.setEmulation(emulation);
  }

  setKvLoadFaults(faults: KvLoadFaultConfig): void {
    this.engine.setKvLoadFaults(faults);
  }

  /** vLLM's add_lora: throws unless the adapter can be served by this engine. */
  async addLora(request: LoRARequest): Promise<void> {
    checkLoraAdapter(this.engine.config, request);
  }

  /** Applied between steps (at once when the engine is idle). */
  resetPrefixCache(options: PrefixCacheReset = {}): Promise<boolean> {
    if (this.#closed) return Promise.reject(closedError());
    return new Promise((resolve) => {
      this.#pendingResets.push({ options, done: resolve });
      if (this.#loop) this.#wakeLoop?.();
      else this.#applyResets();
    });
  }

  validateStructuredOutputs(params: StructuredOutputsParams): Promise<void> {
    return this.engine.validateStructuredOutputs(params);
  }

  abort(requestId: string): void {
    if (!this.#streams.has(requestId)) return;
    const held = this.#held.get(requestId);
    if (held) {
      // Added and aborted at once: the engine writes its final "abort" delta.
      this.#held.delete(requestId);
      if (this.#admitHeld(held)) this.#dispatch(this.engine.abortRequests([requestId]));
      return;
    }
    this.#pendingAborts.add(requestId);
    if (!this.#loop) this.#applyAborts();
    this.#wakeLoop?.();
    this.#ensureLoop();
  }

  /**
   * vLLM's sleep: pauses generation per `mode`, stops the loop and discards the KV cache
   * (the prefix cache is reset and kept requests recompute after waking). Sleeping again
   * while asleep changes nothing.
   */
  async sleep(level: SleepLevel, mode: PauseMode = 'abort'): Promise<void> {
    if (this.#closed) throw closedError();
    if (this.#sleep.level > 0 || this.#pausing) return;
    this.#pausing = true;
    try {
      if (mode === 'abort') {
        for (const id of this.#streams.keys()) if (!this.#held.has(id)) this.#pendingAborts.add(id);
        if (!this.#loop) this.#applyAborts();
      } else if (mode === 'wait') {
        await this.waitIdle();
      }
      this.#sleep = { level, asleep: SLEEP_TAGS };
      this.#wakeLoop?.();
      await this.#loop;
      this.#applyAborts();
      this.engine.resetPrefixCache({ resetRunningRequests: true });
      // Routers learn of the discarded cache now (AllBlocksCleared), not after waking.
      this.engine.flushKvEvents();
    } finally {
      this.#pausing = false;
    }
  }

  /** vLLM's wake_up: brings back `tags` (null = all); generation resumes once all are back. */
  wakeUp(tags: readonly SleepTag[] | null = null): void {
    if (this.#sleep.level === 0) return;
    this.#sleep = afterWake(this.#sleep, tags);
    if (this.#sleep.level > 0) return;
    for (const request of [...this.#held.values()]) {
      this.#held.delete(request.requestId);
      this.#admitHeld(request);
    }
    this.#arrivals++;
    this.#ensureLoop();
  }

  isSleeping(): boolean {
    return this.#sleep.level > 0;
  }

  sleepState(): SleepState {
    return this.#sleep;
  }

  /** Adds a held request to the engine; an invalid one ends its stream with the error. */
  #admitHeld(request: GenerateRequest): boolean {
    try {
      this.engine.addRequest(request);
      return true;
    } catch (e) {
      const stream = this.#streams.get(request.requestId);
      this.#streams.delete(request.requestId);
      if (stream) {
        stream.error = e instanceof Error ? e : new Error(String(e));
        stream.wake?.();
      }
      return false;
    }
  }

  kvEventsInfo(): KVEventsInfo | null {
    return this.engine.kvEventsInfo();
  }

  stats(): EngineStats {
    const s = this.engine.schedulerStats();
    return {
      numRequestsRunning: s.numRunningReqs,
      numRequestsWaiting: s.numWaitingReqs,
      kvCacheUsage: s.kvCacheUsage,
      promptTokensTotal: s.promptTokensTotal,
      generationTokensTotal: s.generationTokensTotal,
      prefixCacheQueriesTotal: s.prefixCacheQueries,
      prefixCacheHitsTotal: s.prefixCacheHits,
      externalPrefixCacheQueriesTotal: s.externalPrefixCacheQueries,
      externalPrefixCacheHitsTotal: s.externalPrefixCacheHits,
      numPreemptionsTotal: s.numPreemptions,
      numRequestsWaitingForRemoteKvs: s.numWaitingForRemoteKvs,
      sleepLevel: this.#sleep.level,
      numRequestsWaitingForLora: s.numWaitingForLora,
      kvFetchByStage: s.kvFetchByStage,
      kvConnectorStats: this.engine.takeKvConnectorStats(),
    };
  }

  onIterationStats(listener: (stats: IterationStats) => void): () => void {
    return this.engine.onIterationStats(listener);
  }

  /** Resolves once no request is live and no hand-off holds blocks. */
  async waitIdle(): Promise<void> {
    while (this.#loop) await this.#loop;
  }

  async shutdown(): Promise<void> {
    if (this.#closed) return;
    for (const id of [...this.#held.keys()]) this.abort(id);
    for (const id of this.#streams.keys()) this.#pendingAborts.add(id);
    this.#applyAborts();
    this.#closed = true;
    for (const { done } of this.#pendingResets.splice(0)) done(false);
    await this.#loop;
    await this.engine.shutdown();
  }

  #ensureLoop(): void {
    if (this.#loop || this.#closed || this.#sleep.level > 0) return;
    this.#loop = this.#run().finally(() => {
      this.#loop = null;
      // A request added after run() made its last check but before this callback would
      // otherwise wait for a loop that has already ended.
      this.#applyAborts();
      if (!this.#closed) this.#applyResets();
      if (this.#streams.size > 0 && this.engine.hasWork()) this.#ensureLoop();
    });
  }

  async #run(): Promise<void> {
    try {
      // Started by the first request after an idle spell: let the requests that arrived in
      // the same event-loop turn (one socket read each) join the first step.
      await yieldToEventLoop();
      while (!this.#closed && this.#sleep.level === 0 && this.engine.hasWork()) {
        if (this.#lastFinished > 0) await this.#refillWait();
        this.#applyAborts();
        this.#applyResets();
        const arrivalsBefore = this.#arrivals;
        this.#kvWoken = false;
        const startedAt = performance.now();
        const { deltas, numScheduledTokens, numLoadsFinished } = await this.engine.step();
        if (numScheduledTokens > 0) this.#noteFinished(deltas, performance.now() - startedAt);
        this.#dispatch(deltas);
        // A step that computed nothing (requests waiting for remote KV, or only reporting
        // finished ids to the runner) waits, unless new requests already arrived, a load
        // finished (its request runs next step) or the engine ran out of work; a request, an
        // abort or the connector's wake-up (a load landed) ends the wait early.
        if (
          numScheduledTokens > 0 ||
          numLoadsFinished > 0 ||
          this.#kvWoken ||
          this.#arrivals !== arrivalsBefore
        )
          await yieldToEventLoop();
        else if (this.engine.hasWork()) await this.#idleWait();
      }
      this.#applyAborts();
    } catch (e) {
      const error = e instanceof Error ? e : new Error(String(e));
      for (const stream of this.#streams.values()) {
        stream.error = error;
        stream.wake?.();
      }
      this.#streams.clear();
    }
  }

  #noteFinished(deltas: readonly RequestOutputDelta[], stepMs: number): void {
    let finished = 0;
    let handedOff = false;
    for (const d of deltas) {
      if (!d.finished) continue;
      finished++;
      if (d.kvTransferParams) handedOff = true;
    }
    // Requests the step left queued (over its budget): the engine is saturated, never wait.
    // A request that handed its KV to the connector (a prefill server's) has a peer about to
    // read its blocks or register for their push: never wait either.
    this.#lastFinished =
      finished === 0 || handedOff || this.engine.schedulerStats().numWaitingReqs > 0 ? 0 : finished;
    this.#arrivalsAtFinish = this.#arrivals;
    this.#lastStepMs = stepMs;
  }

  /**
   * When a step finished every running request (e.g. max_tokens=1), the clients just
   * answered usually send their next request within a millisecond or two; stepping at once
   * would split them into a second, smaller batch a step later (two interleaved cohorts),
   * and small batches cost more per token. So wait until as many requests arrived as
   * finished, bounded by a small share of the last step so open-loop traffic loses little.
   */
  async #refillWait(): Promise<void> {
    const expected = this.#lastFinished;
    this.#lastFinished = 0;
    // Requests already here (arrived while the step ran, or answered in-process at once)
    // are enough: no client is left to wait for.
    if (expected === 0 || this.#arrivals - this.#arrivalsAtFinish >= expected) return;
    if (this.engine.schedulerStats().numRunningReqs > 0) return;
    const arrivalsAtWait = this.#arrivals;
    const limitMs = Math.min(REFILL_WAIT_MAX_MS, this.#lastStepMs * REFILL_WAIT_STEP_SHARE);
    if (limitMs < 0.05) return;
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.#wakeLoop = null;
        resolve();
      };
      const timer = setTimeout(done, limitMs);
      this.#wakeLoop = (): void => {
        if (this.#closed || this.#pendingAborts.size > 0) done();
        else if (this.#arrivals - arrivalsAtWait >= expected) done();
      };
    });
  }

  #idleWait(): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.#wakeLoop = null;
        resolve();
      };
      // The short poll finds completions no wake-up announces; with a connector whose
      // completions all wake the loop, only time-driven work is left for it.
      const ms = this.engine.kvCompletionsWakeLoop()
        ? this.#wokenIdleStepIntervalMs
        : this.#idleStepIntervalMs;
      const timer = setTimeout(done, ms);
      this.#wakeLoop = done;
    });
  }

  #applyResets(): void {
    const resets = this.#pendingResets;
    this.#pendingResets = [];
    for (const { options, done } of resets) done(this.engine.resetPrefixCache(options));
    // Preempted requests wait to be scheduled again.
    if (resets.length > 0 && this.engine.hasWork()) this.#ensureLoop();
  }

  #applyAborts(): void {
    if (this.#pendingAborts.size === 0) return;
    const ids = [...this.#pendingAborts];
    this.#pendingAborts.clear();
    this.#dispatch(this.engine.abortRequests(ids));
  }

  #dispatch(deltas: readonly RequestOutputDelta[]): void {
    for (const delta of deltas) {
      const stream = this.#streams.get(delta.requestId);
      if (!stream) continue;
      stream.deltas.push(delta);
      if (delta.finished) {
        stream.finished = true;
        this.#streams.delete(delta.requestId);
      }
      stream.wake?.();
    }
  }

  kvConnectorDescription(): KVConnectorDescription | null {
    const connector = this.engine.connector;
    return connector
      ? { connectorClass: connector.constructor.name, advertised: connector.advertise() }
      : null;
  }

  kvConnectorMetricSpecs(): readonly ConnectorMetricSpec[] {
    return this.engine.connectorMetricSpecs;
  }

  /**
   * docs/scheduler.md#delayed-free-and-aborts: vLLM's dummy request (one token) carrying the
   * params, added and aborted at once, so the connector's requestFinished releases the peer.
   * Its final delta is dropped.
   */
  notifyKvTransferRequestRejected(requestId: string, params: KVTransferParams): void {
    if (this.#closed) return;
    this.generate(rejectedKvTransferRequest(requestId, params));
    this.abort(requestId);
  }
}

function closedError(): KVError {
  return new KVError('KV_ENGINE_CLOSED', 'The engine has been shut down', {
    hint: 'Create a new AsyncEngine; shutdown() releases the model, the KV memory and the connector.',
  });
}
