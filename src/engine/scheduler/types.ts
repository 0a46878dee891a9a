/**
 * What the scheduler returns to the engine (vLLM's EngineCoreOutput(s) and SchedulerStats)
 * and how it is configured.
 */

import type { KVLoadFailurePolicy } from '../../config/types.ts';
import type { KVConnectorStatsData, KVTransferParams, RequestStatus } from '../../connector/types.ts';
import type { KVCacheEvent } from '../../kv/interfaces.ts';
import type { FinishReason, PositionLogprobs, RequestMetrics } from '../api.ts';

/** One request's progress in one step (the engine turns it into a RequestOutputDelta). */
export interface EngineCoreOutput {
  requestId: string;
  newTokenIds: number[];
  logprobs: number[] | null;
  topLogprobs: Array<Array<{ tokenId: number; logprob: number }>> | null;
  /** The prompt's logprobs, on the output of the first generated token (see RequestOutputDelta). */
  promptLogprobs?: (PositionLogprobs | null)[];
  finished: boolean;
  finishReason: FinishReason | null;
  status: RequestStatus;
  /** The stop token that ended the request (FINISHED_STOPPED by a stop token id). */
  stopTokenId: number | null;
  /** From connector.requestFinished, on the final output only. */
  kvTransferParams: KVTransferParams | null;
  metrics: RequestMetrics;
  /** Set when status is FINISHED_ERROR: readable by the client. */
  error?: { code: string; message: string; hint?: string };
}

export interface SchedulerUpdate {
  outputs: EngineCoreOutput[];
  /** KV cache events of this step: the manager's, the connector's, the workers'. */
  kvCacheEvents: KVCacheEvent[];
  /** Worker stats merged with the scheduler-side connector's stats, or null. */
  kvConnectorStats: KVConnectorStatsData | null;
}

export interface KVFetchStages {
  waiting_to_start: number;
  in_progress: number;
  completed_waiting: number;
}

export interface SchedulerStats {
  numRunningReqs: number;
  numWaitingReqs: number;
  /** Waiting requests the last step held back for --max-loras (a subset of the waiting ones). */
  numWaitingForLora: number;
  /** Requests parked in WAITING_FOR_REMOTE_KVS (a subset of the waiting ones). */
  numWaitingForRemoteKvs: number;
  /** Waiting requests by remote-KV fetch stage (vllm:num_requests_kv_fetch_by_stage). */
  kvFetchByStage: KVFetchStages;
  /** Finished requests whose blocks a connector still holds. */
  numHandoffPending: number;
  kvCacheUsage: number;
  /** Local prefix cache: tokens looked up / found (at admission). */
  prefixCacheQueries: number;
  prefixCacheHits: number;
  /**
   * Connector (external) prefix cache (docs/scheduler.md#how-requests-move): queries =
   * numTokens - local hit, hits = external tokens.
   */
  externalPrefixCacheQueries: number;
  externalPrefixCacheHits: number;
  numPreemptions: number;
  promptTokensTotal: number;
  generationTokensTotal: number;
  /** Distinct adapter names of the running / waiting requests, first seen first (vLLM's lora stats). */
  runningLoraAdapters: string[];
  waitingLoraAdapters: string[];
}

export interface SchedulerOptions {
  /** Tokens per block; defaults to the KV cache manager's block size. */
  blockSize?: number;
  /** Defaults to engineConfig.model.maxModelLen. */
  maxModelLen?: number;
  /** Defaults to kv_transfer_config.kv_load_failure_policy, else 'fail' (vLLM's default). */
  kvLoadFailurePolicy?: KVLoadFailurePolicy;
  /**
   * Beyond vLLM (issue #46283): a request aborted while its KV was still arriving holds its
   * blocks until finished_recving. With a deadline, the blocks are reclaimed after this many
   * ms even if the worker never reports. null (default) = wait forever, as vLLM does.
   */
  abortedLoadReclaimMs?: number | null;
  /** Wall clock in ms (tests inject one). */
  clock?: () => number;
}

export interface ResolvedSchedulerOptions {
  blockSize: number;
  maxModelLen: number;
  maxNumSeqs: number;
  maxNumBatchedTokens: number;
  enableChunkedPrefill: boolean;
  /** Most distinct LoRA adapters among the running requests (--max-loras); null: LoRA is off. */
  maxLoras: number | null;
  kvLoadFailurePolicy: KVLoadFailurePolicy;
  abortedLoadReclaimMs: number | null;
  clock: () => number;
}
