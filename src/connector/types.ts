/**
 * Plain-data types that cross between the scheduler and the workers (docs/connector-api.md). Every
 * value here must survive structuredClone: workers are threads, and nothing is shared.
 */
import type { BlockHash, KVCacheEvent } from '../kv/interfaces.ts';
import type { KVTransferParams } from '../wire/index.ts';

export type { KVTransferParams };

export type KVConnectorRole = 'scheduler' | 'worker';
export const KVConnectorRole = { SCHEDULER: 'scheduler', WORKER: 'worker' } as const;

export type RequestStatus =
  | 'WAITING'
  | 'WAITING_FOR_REMOTE_KVS'
  | 'RUNNING'
  | 'PREEMPTED'
  | 'FINISHED_STOPPED'
  | 'FINISHED_LENGTH_CAPPED'
  | 'FINISHED_ABORTED'
  | 'FINISHED_IGNORED'
  | 'FINISHED_ERROR';

/** What a scheduler-side connector may read (and, for kvTransferParams, rewrite) of a request. */
export interface ConnectorRequest {
  readonly requestId: string;
  readonly promptTokenIds: readonly number[];
  readonly allTokenIds: readonly number[];
  readonly numTokens: number;
  readonly numPromptTokens: number;
  readonly numComputedTokens: number;
  readonly blockHashes: readonly BlockHash[];
  readonly status: RequestStatus;
  readonly maxTokens: number;
  readonly cacheSalt?: string | undefined;
  kvTransferParams: KVTransferParams | null;
}

/** A request scheduled for the first time in this step. */
export interface NewRequestData {
  reqId: string;
  /** The request's own (immutable) prompt: shared, not copied, within a process. */
  promptTokenIds: readonly number[];
  /** One block-id list per KV cache group. */
  blockIds: number[][];
  numComputedTokens: number;
}

/** Requests that ran before; new blocks are appended to their block tables. */
export interface CachedRequestData {
  reqIds: string[];
  resumedFromPreemption: boolean[];
  /** Per request: newly allocated block ids per group, or null (none). */
  newBlockIds: (number[][] | null)[];
  /** New token ids per request (only for resumed requests, which need all of them). */
  newTokenIds: number[][];
  numComputedTokens: number[];
}

/** The scheduler's per-step output as connectors see it (docs/scheduler.md#connector-calls-per-step). */
export interface SchedulerOutput {
  scheduledNewReqs: NewRequestData[];
  scheduledCachedReqs: CachedRequestData;
  /** reqId → tokens scheduled this step. */
  numScheduledTokens: Record<string, number>;
  totalNumScheduledTokens: number;
  /** Requests finished since the previous step. */
  finishedReqIds: string[];
  preemptedReqIds: string[];
  /** Set by the scheduler after buildConnectorMeta. */
  kvConnectorMetadata: KVConnectorMetadata | null;
}

/** Scheduler → worker payload of one step. Connector-specific, plain data. */
export type KVConnectorMetadata = Record<string, unknown>;

/** Worker → scheduler per-step payload (vLLM's KVConnectorWorkerMetadata). */
export type KVConnectorWorkerMetadata = Record<string, unknown>;

/** Stats collected since the last call, as plain data (vLLM's KVConnectorStats.data). */
export type KVConnectorStatsData = Record<string, unknown>;

/** Out-of-band handshake data a worker publishes for the scheduler-side connector. */
export type KVConnectorHandshakeMetadata = Record<string, unknown>;

/** Worker → scheduler output of one step (vLLM's KVConnectorOutput). */
export interface KVConnectorOutput {
  finishedSending: string[] | null;
  finishedRecving: string[] | null;
  /** Block ids (of any group) whose load failed. */
  invalidBlockIds: number[];
  kvConnectorStats: KVConnectorStatsData | null;
  kvCacheEvents: KVCacheEvent[] | null;
  kvConnectorWorkerMeta: KVConnectorWorkerMetadata | null;
  /** 0 = no change; otherwise how many workers must report a finished id. */
  expectedFinishedCount: number;
}

export function emptyConnectorOutput(): KVConnectorOutput {
  return {
    finishedSending: null,
    finishedRecving: null,
    invalidBlockIds: [],
    kvConnectorStats: null,
    kvCacheEvents: null,
    kvConnectorWorkerMeta: null,
    expectedFinishedCount: 0,
  };
}

export interface MatchedTokens {
  /** Tokens loadable beyond numComputedTokens; null = still looking up, ask again next step. */
  count: number | null;
  /** True: the tokens arrive between steps (the request waits in WAITING_FOR_REMOTE_KVS). */
  loadAsync: boolean;
}

export interface RequestFinishedResult {
  /** True: the connector owns the blocks until the id appears in finishedSending. */
  delayFree: boolean;
  kvTransferParams: KVTransferParams | null;
}

/** Per-step context handed to worker-side hooks. */
export interface ForwardContext {
  schedulerOutput: SchedulerOutput;
  /** False on idle steps (no tokens scheduled): transfers still progress. */
  hasForward: boolean;
}
