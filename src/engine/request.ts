/**
 * One generation request as the scheduler tracks it (vLLM's v1 Request): tokens, progress,
 * prefix hashes, status, stop checking and per-request metrics. The connector lifecycle
 * state lives here too (`lifecycle`), but only src/engine/request-lifecycle.ts changes it.
 */
import type { ConnectorRequest, KVTransferParams, RequestStatus } from '../connector/types.ts';
import type { BlockHash, CacheRequest } from '../kv/interfaces.ts';
import type { FinishReason, RequestMetrics, SamplingParams } from './api.ts';
import type { LoRARequest } from './lora/lora-request.ts';
import type { LifecycleState } from './request-lifecycle.ts';

/** Hashes of the request's new full blocks: a function, or src/kv's createBlockHasher() object. */
export type BlockHashSource =
  | ((request: CacheRequest) => BlockHash[])
  | { newHashes(request: CacheRequest): BlockHash[] };

export interface RequestInit {
  requestId: string;
  promptTokenIds: readonly number[];
  sampling: SamplingParams;
  /** End-of-sequence token of the tokenizer; null = none. */
  eosTokenId?: number | null;
  kvTransferParams?: KVTransferParams | null;
  cacheSalt?: string | undefined;
  /** Wall-clock ms; defaults to Date.now(). */
  arrivalTime?: number;
  blockHasher?: BlockHashSource | null;
  loraRequest?: LoRARequest | null;
  /** Record the wall-clock milestones of RequestMetrics (a server keeping request timelines). */
  recordMilestones?: boolean;
}

/** Why a request is waiting on its peer after it finished (see HANDOFF_PENDING). */
export interface PendingHandoff {
  /** Blocks may still receive a remote write: free only after finished_recving. */
  recv: boolean;
  /** The connector sends from the blocks: free only after finished_sending. */
  send: boolean;
  /** Wall-clock ms when the hand-off started. */
  since: number;
}

export class Request implements ConnectorRequest, CacheRequest {
  readonly requestId: string;
  readonly promptTokenIds: readonly number[];
  readonly outputTokenIds: number[] = [];
  readonly sampling: SamplingParams;
  readonly eosTokenId: number | null;
  readonly cacheSalt: string | undefined;
  /** The adapter this request runs with, null for the base model. */
  readonly loraRequest: LoRARequest | null;
  readonly arrivalTime: number;
  readonly blockHashes: BlockHash[] = [];
  readonly metrics: RequestMetrics;
  kvTransferParams: KVTransferParams | null;
  numComputedTokens = 0;
  status: RequestStatus = 'WAITING';
  /** Connector lifecycle state; changed only through request-lifecycle.ts. */
  lifecycle: LifecycleState = 'WAITING';
  numPreemptions = 0;
  /** Wall-clock ms of the first step that scheduled this request, null before. */
  firstScheduledAt: number | null = null;
  /** The stop token that finished the request, if any. */
  stopTokenId: number | null = null;
  /** Set when the request finished with FINISHED_ERROR. */
  error: { code: string; message: string; hint?: string } | null = null;
  /** Set while the request is HANDOFF_PENDING. */
  pendingHandoff: PendingHandoff | null = null;
  /** Block ids handed to the connector in requestFinished (checked by the invariants). */
  handoffBlockIds: number[][] | null = null;
  readonly #tokens: number[];
  readonly #blockHasher: BlockHashSource | null;

  constructor(init: RequestInit) {
    this.requestId = init.requestId;
    this.promptTokenIds = init.promptTokenIds.slice();
    this.#tokens = withRoom(init.promptTokenIds);
    this.sampling = init.sampling;
    this.eosTokenId = init.eosTokenId ?? null;
    this.kvTransferParams = init.kvTransferParams ?? null;
    this.cacheSalt = init.cacheSalt;
    this.loraRequest = init.loraRequest ?? null;
    this.arrivalTime = init.arrivalTime ?? Date.now();
    this.#blockHasher = init.blockHasher ?? null;
    this.metrics = {
      arrivalTime: this.arrivalTime,
      queuedMs: 0,
      scheduledAt: null,
      numCachedTokens: 0,
      ttftMs: null,
      e2eMs: null,
      numPromptTokens: this.promptTokenIds.length,
      numLocalComputedTokens: 0,
      numLocalCachedTokens: 0,
      numExternalTokens: 0,
      externalCacheHitSources: {},
      numGeneratedTokens: 0,
      ...(init.recordMilestones
        ? { milestones: { kvLoadStartedAt: null, kvLoadFinishedAt: null, scheduledAt: null } }
        : {}),
    };
    this.#updateBlockHashes();
  }

  /** The adapter's name: an extra key of every block hash (vLLM's LoRA extra key). */
  get loraName(): string | undefined {
    return this.loraRequest?.loraName;
  }

  /** The adapter's integer id, carried by the KV events of its blocks. */
  get loraId(): number | undefined {
    return this.loraRequest?.loraIntId;
  }

  get allTokenIds(): readonly number[] {
    return this.#tokens;
  }

  get numTokens(): number {
    return this.#tokens.length;
  }

  get numPromptTokens(): number {
    return this.promptTokenIds.length;
  }

  get numOutputTokens(): number {
    return this.outputTokenIds.length;
  }

  get maxTokens(): number {
    return this.sampling.maxTokens;
  }

  get isFinished(): boolean {
    return isFinishedStatus(this.status);
  }

  appendOutputToken(tokenId: number): void {
    this.outputTokenIds.push(tokenId);
    this.#tokens.push(tokenId);
    this.metrics.numGeneratedTokens = this.outputTokenIds.length;
    this.#updateBlockHashes();
  }

  /**
   * vLLM's check_stop, after a token was appended: EOS (unless ignoreEos), a stop token,
   * then max tokens / max model length. Returns the finished status, or null to go on.
   */
  checkStop(maxModelLen: number): RequestStatus | null {
    const last = this.outputTokenIds[this.outputTokenIds.length - 1];
    // vLLM: nothing but the length limits ends a request before min_tokens.
    if (last !== undefined && this.outputTokenIds.length >= (this.sampling.minTokens ?? 0)) {
      if (!this.sampling.ignoreEos && this.eosTokenId !== null && last === this.eosTokenId) {
        return 'FINISHED_STOPPED';
      }
      if (this.sampling.stopTokenIds.includes(last)) {
        this.stopTokenId = last;
        return 'FINISHED_STOPPED';
      }
    }
    if (this.numTokens >= maxModelLen || this.numOutputTokens >= this.maxTokens) {
      return 'FINISHED_LENGTH_CAPPED';
    }
    return null;
  }

  getFinishReason(): FinishReason | null {
    return finishReasonOf(this.status);
  }

  #updateBlockHashes(): void {
    const hasher = this.#blockHasher;
    if (!hasher) return;
    const added = typeof hasher === 'function' ? hasher(this) : hasher.newHashes(this);
    this.blockHashes.push(...added);
  }
}

/** Room for output tokens in a request's token list before it must grow. */
const PADDING: readonly number[] = new Array<number>(64).fill(0);

/**
 * A copy of `tokens` with capacity for more. A long prompt's array is a large heap object:
 * growing it on the first push reallocates it, which costs several times the copy itself and
 * showed up in trace simulations' profiles.
 */
function withRoom(tokens: readonly number[]): number[] {
  const copy = tokens.concat(PADDING);
  copy.length = tokens.length;
  return copy;
}

export function isFinishedStatus(status: RequestStatus): boolean {
  return status.startsWith('FINISHED_');
}

export function finishReasonOf(status: RequestStatus): FinishReason | null {
  switch (status) {
    case 'FINISHED_STOPPED':
      return 'stop';
    case 'FINISHED_LENGTH_CAPPED':
    case 'FINISHED_IGNORED':
      return 'length';
    case 'FINISHED_ABORTED':
      return 'abort';
    case 'FINISHED_ERROR':
      return 'error';
    default:
      return null;
  }
}
