/**
 * The engine's public request API, as the HTTP server and the `LLM` class use it.
 * Implemented by src/engine/async-engine.ts; consumed by src/server/.
 */
import type { EmulationConfig } from '../config/emulation-config.ts';
import type { KvLoadFaultConfig } from '../config/fault-injection.ts';
import type { EngineConfig } from '../config/types.ts';
import type { CachedTokensBySource } from '../connector/cache-hit-source.ts';
import type { ConnectorMetricSpec } from '../connector/metric-specs.ts';
import type { KVTransferParams } from '../connector/types.ts';
import type { ChatRenderOptions } from '../tokenizer/chat-template.ts';
import type { TokenizerLike } from '../tokenizer/types.ts';
import type { ConnectorAdvertisement, KVEventsInfo } from '../wire/index.ts';
import type { IterationStats } from './iteration-stats.ts';
import type { LoRARequest } from './lora/lora-request.ts';
import type { PauseMode, SleepLevel, SleepTag } from './sleep-mode.ts';
import type { StructuredOutputsParams } from './structured/params.ts';

export type { KVEventsInfo } from '../wire/index.ts';
export type {
  CompletedTiming,
  FinishedRequestStats,
  IterationStats,
  PromptTokenStats,
} from './iteration-stats.ts';

export interface SamplingParams {
  maxTokens: number;
  /** 0 = greedy. */
  temperature: number;
  topP: number;
  /** 0 or -1 = disabled. */
  topK: number;
  seed: number | null;
  stop: string[];
  stopTokenIds: number[];
  ignoreEos: boolean;
  /** Number of top logprobs to return per token (0..20), or null for none. */
  logprobs: number | null;
  /**
   * vLLM's prompt_logprobs: the logprob and rank of every prompt token after the first, with
   * this many top alternatives (0 = the token alone); null or absent = none. Such a request
   * does not read the local prefix cache, as in vLLM (every position must be computed).
   */
  promptLogprobs?: number | null;
  /** vLLM's min_tokens: EOS, stop tokens and stop strings do not end the request before this many tokens. */
  minTokens?: number;
  /** Added to the logits of these token ids (clamped to [-100, 100], as vLLM does). */
  logitBias?: Record<number, number>;
  /** > 1 discourages tokens seen in the prompt or the output (vLLM's repetition_penalty). */
  repetitionPenalty?: number;
  /** Subtracted once per occurrence of a token in the output. */
  frequencyPenalty?: number;
  /** Subtracted once from every token the output contains. */
  presencePenalty?: number;
  /** Only these token ids can be sampled. */
  allowedTokenIds?: number[] | null;
  /** Token sequences the output must not contain (vLLM's bad_words, already tokenized). */
  badWordsTokenIds?: number[][];
  /** The model's EOS id, set by the engine (vLLM's SamplingParams.eos_token_id), for min_tokens. */
  eosTokenId?: number | null;
  /** The constraint the output follows (vLLM's structured_outputs), applied with XGrammar. */
  structuredOutputs?: StructuredOutputsParams | null;
}

/** One position's logprobs (vLLM's `dict[int, Logprob]` of that position, in its order). */
export interface PositionLogprobs {
  /** The token at this position (the prompt token, or the sampled one). */
  tokenId: number;
  logprob: number;
  /** 1-based rank of the token in the model's distribution. */
  rank: number;
  /** The most likely tokens, most likely first (rank i + 1). */
  top: Array<{ tokenId: number; logprob: number }>;
}

export type FinishReason = 'stop' | 'length' | 'abort' | 'error';

export interface GenerateRequest {
  requestId: string;
  /** Either text (tokenized by the engine) or token ids. */
  prompt?: string;
  promptTokenIds?: number[];
  sampling: SamplingParams;
  kvTransferParams?: KVTransferParams | null;
  cacheSalt?: string;
  /** The LoRA adapter the request runs with (vLLM's lora_request); absent: the base model. */
  loraRequest?: LoRARequest | null;
  /**
   * kvconnect: called, synchronously, before the forward pass of the step that completes the
   * prompt and finishes the request, with the kv_transfer_params its final output will carry,
   * when the connector knows them then (docs/connector-api.md#params-ahead).
   */
  onKvTransferParamsAhead?: (params: KVTransferParams) => void;
  /** kvconnect: record RequestMetrics.milestones (the server's request timelines need them). */
  recordMilestones?: boolean;
}

export interface RequestMetrics {
  /** Wall-clock ms (Date.now()) when the request arrived. */
  arrivalTime: number;
  /** ms spent waiting before first scheduled (including waiting for remote KV). */
  queuedMs: number;
  /** Wall-clock ms of the first step that scheduled the request to run, null before. */
  scheduledAt: number | null;
  /**
   * Prompt tokens it did not compute when first scheduled (local prefix hit + loaded
   * through the connector; vLLM's num_cached_tokens), 0 before.
   */
  numCachedTokens: number;
  /** ms from arrival to the first generated token, null before it. */
  ttftMs: number | null;
  /** ms from arrival to finish, null before it. */
  e2eMs: number | null;
  numPromptTokens: number;
  /** Prompt tokens this engine computed itself. */
  numLocalComputedTokens: number;
  /** Prompt tokens found in the local prefix cache. */
  numLocalCachedTokens: number;
  /** Prompt tokens loaded through the KV connector. */
  numExternalTokens: number;
  /** The connector's tokens by where they came from (sums to numExternalTokens). */
  externalCacheHitSources: CachedTokensBySource;
  numGeneratedTokens: number;
  /** Precise times of the request's first milestones, for request timelines (optional). */
  milestones?: RequestMilestones;
}

/**
 * When a request started and finished loading its KV from a peer (an async connector load)
 * and was first scheduled to compute: wall-clock ms with sub-millisecond resolution
 * (performance.timeOrigin + performance.now(), comparable between processes of one host),
 * null until it happens. The server's request timelines read them (docs/serve.md#request-timelines).
 */
export interface RequestMilestones {
  kvLoadStartedAt: number | null;
  kvLoadFinishedAt: number | null;
  scheduledAt: number | null;
}

/** One streamed step of a request; the last one has finished = true. */
export interface RequestOutputDelta {
  requestId: string;
  newTokenIds: number[];
  newText: string;
  /** Logprob of each new token (same length as newTokenIds) when requested. */
  logprobs: number[] | null;
  /** Top logprobs per new token when requested: token id → logprob. */
  topLogprobs: Array<Array<{ tokenId: number; logprob: number }>> | null;
  /**
   * With `promptLogprobs`: one entry per prompt token, the first null (nothing precedes it),
   * on the delta of the first generated token only.
   */
  promptLogprobs?: (PositionLogprobs | null)[];
  finished: boolean;
  finishReason: FinishReason | null;
  /** vLLM's stop_reason: the stop string or stop token id that ended the request (null for EOS or length). */
  stopReason?: string | number | null;
  /** Connector output for this request (set on the final delta). */
  kvTransferParams: KVTransferParams | null;
  metrics: RequestMetrics;
  /** Set when finishReason is 'error'. */
  error?: { code: string; message: string; hint?: string };
}

export type { ChatRenderOptions, StructuredOutputsParams, TokenizerLike };

export interface EngineStats {
  numRequestsRunning: number;
  numRequestsWaiting: number;
  kvCacheUsage: number;
  promptTokensTotal: number;
  generationTokensTotal: number;
  prefixCacheQueriesTotal: number;
  prefixCacheHitsTotal: number;
  externalPrefixCacheQueriesTotal: number;
  externalPrefixCacheHitsTotal: number;
  numPreemptionsTotal: number;
  /** Waiting requests parked until their KV arrives from a peer (a subset of the waiting ones). */
  numRequestsWaitingForRemoteKvs: number;
  /** vLLM's sleep level: 0 awake, 1 weights offloaded, 2 everything discarded. */
  sleepLevel?: 0 | 1 | 2;
  /** Waiting requests held back by --max-loras (vLLM counts them as `deferred`). */
  numRequestsWaitingForLora?: number;
  /** Waiting requests by remote-KV fetch stage (`waiting_to_start`, `in_progress`, `completed_waiting`). */
  kvFetchByStage?: { waiting_to_start: number; in_progress: number; completed_waiting: number };
  /**
   * Connector stats since the last call (plain data, connector-specific keys); null while
   * an onIterationStats listener receives them step by step instead.
   */
  kvConnectorStats: Record<string, unknown> | null;
}

/** The engine's connector as GET /kvconnect/info describes it. */
export interface KVConnectorDescription {
  /** The class that implements it (differs from kv_connector for kv_connector_module_path connectors). */
  connectorClass: string;
  /** What the scheduler-side instance advertises (KVConnectorBase.advertise()). */
  advertised: ConnectorAdvertisement;
}

export interface AsyncEngineLike {
  readonly config: EngineConfig;
  readonly tokenizer: TokenizerLike;
  /** KV cache blocks of the engine (vLLM's num_gpu_blocks), when known. */
  readonly numGpuBlocks?: number;
  /** Streams deltas until the request finishes; aborting the signal aborts the request. */
  generate(request: GenerateRequest, signal?: AbortSignal): AsyncIterable<RequestOutputDelta>;
  abort(requestId: string): void;
  /** Counters since start (monotonic) plus current gauges. */
  stats(): EngineStats;
  /**
   * Calls `listener` with the stats of every engine iteration (vLLM's IterationStats:
   * tokens, latencies, finished requests) as it happens; returns the unsubscribe function.
   */
  onIterationStats?(listener: (stats: IterationStats) => void): () => void;
  /**
   * vLLM's reset_prefix_cache, applied between engine steps: true when the local prefix
   * cache (and with resetConnector the connector's cache) was cleared.
   */
  resetPrefixCache?(options?: { resetRunningRequests?: boolean; resetConnector?: boolean }): Promise<boolean>;
  /** vLLM's add_lora: resolves once the adapter is known to load into this engine, else throws. */
  addLora?(request: LoRARequest): Promise<void>;
  shutdown(): Promise<void>;
  /** vLLM's sleep mode (engine/sleep-mode.ts); absent when the engine cannot sleep. */
  sleep?(level: SleepLevel, mode?: PauseMode): Promise<void>;
  wakeUp?(tags?: readonly SleepTag[] | null): void;
  isSleeping?(): boolean;
  /** Where this engine publishes KV cache events (snake_case, as /kvconnect/info serves it); null when it does not. */
  kvEventsInfo?(): KVEventsInfo | null;
  /** The connector's class and advertisement for peers and proxies (GET /kvconnect/info); null without one. */
  kvConnectorDescription?(): KVConnectorDescription | null;
  /** The Prometheus metrics the connector's class declares (KVConnectorBase.metricSpecs); [] without one. */
  kvConnectorMetricSpecs?(): readonly ConnectorMetricSpec[];
  /**
   * docs/scheduler.md#delayed-free-and-aborts: a request rejected before admission still
   * reaches the connector, so a prefill peer frees the blocks it holds for it (vLLM's
   * notify_kv_transfer_request_rejected).
   */
  notifyKvTransferRequestRejected?(requestId: string, params: KVTransferParams): void;
  /** POST /admin/config: the step-time model from the next step on (config.emulation is not changed). */
  setEmulation?(emulation: EmulationConfig | null): void;
  /**
   * Compiles a structured-output constraint (cached for the request that follows); throws a
   * 400 KVError naming what is wrong. Absent when the engine cannot serve structured outputs.
   */
  validateStructuredOutputs?(params: StructuredOutputsParams): Promise<void>;
  /** POST /admin/config: the injected KV-load faults from the next load on. */
  setKvLoadFaults?(faults: KvLoadFaultConfig): void;
}
