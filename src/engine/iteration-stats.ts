/**
 * vLLM's IterationStats: what one engine iteration did, derived from its output deltas —
 * prompt tokens by source (counted once per request, at its first output), generated
 * tokens, time to first token, inter-token latencies and, per finished request, its phase
 * timings (queued → scheduled → first token → last token). The server turns them into the
 * vllm:* histograms and counters. Times are seconds, as vLLM reports them.
 */
import {
  addCachedTokens,
  CACHE_HIT_SOURCES,
  type CacheHitSource,
  trimCachedTokens,
} from '../connector/cache-hit-source.ts';
import type { FinishReason, RequestOutputDelta } from './api.ts';

/**
 * Prompt tokens by where they came from. A full prompt hit still recomputes its last token
 * (the model needs one input); vLLM counts that token in local_cache_hit and as recomputed,
 * so computed + localCacheHit + externalKvTransfer = total + recomputed.
 */
export interface PromptTokenStats {
  computed: number;
  localCacheHit: number;
  externalKvTransfer: number;
  cached: number;
  recomputed: number;
  total: number;
  /** The cached tokens by physical source (sums to `cached`): the local prefix cache is `device`. */
  cachedBySource: Record<CacheHitSource, number>;
}

/** Phase timings of a request that generated at least one token. */
export interface CompletedTiming {
  queuedSeconds: number;
  prefillSeconds: number;
  decodeSeconds: number;
  inferenceSeconds: number;
  /** Mean time per output token after the first; null with a single token. */
  meanTimePerOutputTokenSeconds: number | null;
}

export interface FinishedRequestStats {
  finishReason: FinishReason;
  e2eSeconds: number;
  numPromptTokens: number;
  numGenerationTokens: number;
  maxTokensParam: number | null;
  numCachedTokens: number;
  /** null: never scheduled; only queuedSeconds: scheduled, no token; else every phase. */
  timing: { queuedSeconds: number } | CompletedTiming | null;
}

export interface IterationStats {
  /** 'step' for a model step; 'abort' for requests finished between steps. */
  kind: 'step' | 'abort';
  numGenerationTokens: number;
  promptTokens: PromptTokenStats;
  timeToFirstTokensSeconds: number[];
  interTokenLatenciesSeconds: number[];
  finished: FinishedRequestStats[];
  /** The KV connector's stats of this iteration (its own keys), or null. */
  kvConnectorStats: Record<string, unknown> | null;
  /** With LoRA on: the adapters of the running and waiting requests after this iteration. */
  loraAdapters?: { running: string[]; waiting: string[] };
}

interface RequestState {
  maxTokens: number | null;
  seenOutput: boolean;
  numGenerated: number;
  /** Wall-clock ms (fractional). */
  firstTokenAt: number | null;
  lastTokenAt: number | null;
}

/** Epoch milliseconds with sub-millisecond resolution. */
export const wallClockMs = (): number => performance.timeOrigin + performance.now();

export function emptyPromptTokenStats(): PromptTokenStats {
  return {
    computed: 0,
    localCacheHit: 0,
    externalKvTransfer: 0,
    cached: 0,
    recomputed: 0,
    total: 0,
    cachedBySource: { device: 0, host: 0, p2p: 0, disk: 0, external_unspecified: 0 },
  };
}

/** Builds one IterationStats per call from the deltas of that iteration. */
export class IterationStatsBuilder {
  readonly #requests = new Map<string, RequestState>();
  readonly #clock: () => number;

  constructor(clock: () => number = wallClockMs) {
    this.#clock = clock;
  }

  addRequest(requestId: string, maxTokens: number | null): void {
    this.#requests.set(requestId, {
      maxTokens,
      seenOutput: false,
      numGenerated: 0,
      firstTokenAt: null,
      lastTokenAt: null,
    });
  }

  get numTracked(): number {
    return this.#requests.size;
  }

  build(
    kind: IterationStats['kind'],
    deltas: readonly RequestOutputDelta[],
    kvConnectorStats: Record<string, unknown> | null = null,
  ): IterationStats {
    const now = this.#clock();
    const stats: IterationStats = {
      kind,
      numGenerationTokens: 0,
      promptTokens: emptyPromptTokenStats(),
      timeToFirstTokensSeconds: [],
      interTokenLatenciesSeconds: [],
      finished: [],
      kvConnectorStats,
    };
    for (const delta of deltas) {
      const state = this.#requests.get(delta.requestId);
      if (!state) continue;
      const m = delta.metrics;
      const newTokens = delta.newTokenIds.length;
      if (!state.seenOutput) {
        state.seenOutput = true;
        if (m.scheduledAt !== null) addPrompt(stats.promptTokens, m);
      }
      if (newTokens > 0) {
        stats.numGenerationTokens += newTokens;
        if (state.firstTokenAt === null) {
          state.firstTokenAt = now;
          stats.timeToFirstTokensSeconds.push(seconds(m.arrivalTime, now));
        } else if (state.lastTokenAt !== null) {
          stats.interTokenLatenciesSeconds.push(seconds(state.lastTokenAt, now));
        }
        state.lastTokenAt = now;
        state.numGenerated += newTokens;
      }
      if (delta.finished) {
        this.#requests.delete(delta.requestId);
        stats.finished.push(finishedStats(delta, state, now));
      }
    }
    return stats;
  }
}

function addPrompt(p: PromptTokenStats, m: RequestOutputDelta['metrics']): void {
  const promptLen = m.numPromptTokens;
  const cached = m.numCachedTokens;
  const recomputed = cached + 1 === promptLen ? 1 : 0;
  p.computed += promptLen - cached;
  p.externalKvTransfer += m.numExternalTokens;
  p.localCacheHit += cached + recomputed - m.numExternalTokens;
  p.cached += cached;
  p.recomputed += recomputed;
  p.total += promptLen;
  // By source the counts sum to `cached`: a recomputed last token of a full external hit
  // is not cached, and comes off the connector's slowest source.
  const bySource = p.cachedBySource;
  const external = Math.min(m.numExternalTokens, cached);
  addCachedTokens(bySource, 'device', cached - external);
  const sources = trimCachedTokens(m.externalCacheHitSources, external);
  for (const source of CACHE_HIT_SOURCES) addCachedTokens(bySource, source, sources[source] ?? 0);
}

function finishedStats(delta: RequestOutputDelta, state: RequestState, now: number): FinishedRequestStats {
  const m = delta.metrics;
  let timing: FinishedRequestStats['timing'] = null;
  if (m.scheduledAt !== null) {
    const queuedSeconds = seconds(m.arrivalTime, m.scheduledAt);
    if (state.firstTokenAt !== null && state.lastTokenAt !== null) {
      const decodeSeconds = seconds(state.firstTokenAt, state.lastTokenAt);
      timing = {
        queuedSeconds,
        prefillSeconds: seconds(m.scheduledAt, state.firstTokenAt),
        decodeSeconds,
        inferenceSeconds: seconds(m.scheduledAt, state.lastTokenAt),
        meanTimePerOutputTokenSeconds:
          state.numGenerated > 1 ? decodeSeconds / (state.numGenerated - 1) : null,
      };
    } else {
      timing = { queuedSeconds };
    }
  }
  return {
    finishReason: delta.finishReason ?? 'abort',
    e2eSeconds: seconds(m.arrivalTime, now),
    numPromptTokens: m.numPromptTokens,
    numGenerationTokens: state.numGenerated,
    maxTokensParam: state.maxTokens,
    numCachedTokens: m.numCachedTokens,
    timing,
  };
}

/** The scheduler stamps whole milliseconds (Date.now), this builder fractional ones: never below 0. */
function seconds(fromMs: number, toMs: number): number {
  return Math.max(0, toMs - fromMs) / 1000;
}
