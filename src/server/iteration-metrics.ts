/**
 * The vllm:* families fed by the engine's iteration stats, with vLLM's names, help texts,
 * buckets and label sets (vllm/v1/metrics/loggers.py, PrometheusStatLogger). A Python
 * Counter named `vllm:x` is served as `vllm:x_total`, so the counters here carry the
 * suffix in their names: the text on the wire is the same.
 */
import { Counter, Histogram, type Registry } from 'prom-client';
import { CACHE_HIT_SOURCES, type CacheHitSource } from '../connector/cache-hit-source.ts';
import type { IterationStats } from '../engine/api.ts';

/** vLLM's FINISH_REASON_STRINGS; every reason's series exists from the start, at 0. */
export const FINISH_REASONS: readonly string[] = ['stop', 'length', 'abort', 'error', 'repetition'];
const PROMPT_SOURCES = ['local_compute', 'local_cache_hit', 'external_kv_transfer'] as const;

export const TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640,
  2560,
];
export const TOKEN_LATENCY_BUCKETS = [
  0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80,
];
export const REQUEST_LATENCY_BUCKETS = [
  0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680,
];
const ITERATION_TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384];

/** vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to maxValue. */
export function buckets125(maxValue: number): number[] {
  const out: number[] = [];
  for (let scale = 1; ; scale *= 10) {
    for (const m of [1, 2, 5]) {
      if (m * scale > maxValue) return out;
      out.push(m * scale);
    }
  }
}

type Labels = Record<string, string>;
type HistogramKey =
  | 'promptTokens'
  | 'generationTokens'
  | 'iterationTokens'
  | 'maxTokens'
  | 'ttft'
  | 'itl'
  | 'tpot'
  | 'e2e'
  | 'queue'
  | 'inference'
  | 'prefill'
  | 'decode'
  | 'prefillKvComputed';

export class IterationMetrics {
  readonly #labels: Labels;
  readonly #promptTokens: Counter;
  readonly #promptBySource: Counter;
  readonly #promptCached: Counter;
  readonly #cachedBySource: Counter;
  readonly #cachedSourceLabels: Record<CacheHitSource, Labels>;
  readonly #promptRecomputed: Counter;
  readonly #generationTokens: Counter;
  readonly #success: Counter;
  readonly #h: Record<HistogramKey, Histogram>;
  /** Label sets built once: record() runs every engine step. */
  readonly #sourceLabels: Record<(typeof PROMPT_SOURCES)[number], Labels>;
  readonly #reasonLabels = new Map<string, Labels>();

  constructor(registry: Registry, labels: Labels, maxModelLen: number) {
    this.#labels = labels;
    const labelNames = Object.keys(labels);
    const registers = [registry];
    const counter = (name: string, help: string, extra: string[] = []): Counter =>
      new Counter({ name, help, labelNames: [...labelNames, ...extra], registers });
    this.#promptTokens = counter('vllm:prompt_tokens_total', 'Number of prefill tokens processed.');
    this.#promptBySource = counter(
      'vllm:prompt_tokens_by_source_total',
      'Number of prompt tokens by source.',
      ['source'],
    );
    this.#promptCached = counter(
      'vllm:prompt_tokens_cached_total',
      'Number of cached prompt tokens (local + external).',
    );
    this.#cachedBySource = counter(
      'vllm:prompt_tokens_cached_by_source_total',
      'Number of cached prompt tokens by physical source.',
      ['source'],
    );
    // vllm:prompt_tokens_cached_by_source: one series per CacheHitSource, from the start.
    this.#cachedSourceLabels = Object.fromEntries(
      CACHE_HIT_SOURCES.map((s): [string, Labels] => [s, { ...labels, source: s }]),
    ) as Record<CacheHitSource, Labels>;
    for (const source of CACHE_HIT_SOURCES) this.#cachedBySource.inc(this.#cachedSourceLabels[source], 0);
    this.#promptRecomputed = counter(
      'vllm:prompt_tokens_recomputed_total',
      'Number of cached tokens recomputed for forward pass.',
    );
    this.#generationTokens = counter(
      'vllm:generation_tokens_total',
      'Number of generation tokens processed.',
    );
    this.#success = counter('vllm:request_success_total', 'Count of successfully processed requests.', [
      'finished_reason',
    ]);
    for (const c of [this.#promptTokens, this.#promptCached, this.#promptRecomputed, this.#generationTokens])
      c.inc(labels, 0);
    this.#sourceLabels = {
      local_compute: { ...labels, source: 'local_compute' },
      local_cache_hit: { ...labels, source: 'local_cache_hit' },
      external_kv_transfer: { ...labels, source: 'external_kv_transfer' },
    };
    for (const source of PROMPT_SOURCES) this.#promptBySource.inc(this.#sourceLabels[source], 0);
    for (const reason of FINISH_REASONS) this.#success.inc(this.#reasonLabelsOf(reason), 0);

    const lengths = buckets125(maxModelLen);
    const histogram = (name: string, help: string, buckets: number[]): Histogram => {
      const h = new Histogram({ name, help, labelNames, buckets, registers });
      h.zero(labels);
      return h;
    };
    this.#h = {
      promptTokens: histogram('vllm:request_prompt_tokens', 'Number of prefill tokens processed.', lengths),
      generationTokens: histogram(
        'vllm:request_generation_tokens',
        'Number of generation tokens processed.',
        lengths,
      ),
      iterationTokens: histogram(
        'vllm:iteration_tokens_total',
        'Histogram of number of tokens per engine_step.',
        ITERATION_TOKEN_BUCKETS,
      ),
      maxTokens: histogram(
        'vllm:request_params_max_tokens',
        'Histogram of the max_tokens request parameter.',
        lengths,
      ),
      ttft: histogram(
        'vllm:time_to_first_token_seconds',
        'Histogram of time to first token in seconds.',
        TTFT_BUCKETS,
      ),
      itl: histogram(
        'vllm:inter_token_latency_seconds',
        'Histogram of inter-token latency in seconds.',
        TOKEN_LATENCY_BUCKETS,
      ),
      tpot: histogram(
        'vllm:request_time_per_output_token_seconds',
        'Histogram of time_per_output_token_seconds per request.',
        TOKEN_LATENCY_BUCKETS,
      ),
      e2e: histogram(
        'vllm:e2e_request_latency_seconds',
        'Histogram of e2e request latency in seconds.',
        REQUEST_LATENCY_BUCKETS,
      ),
      queue: histogram(
        'vllm:request_queue_time_seconds',
        'Histogram of time spent in WAITING phase for request.',
        REQUEST_LATENCY_BUCKETS,
      ),
      inference: histogram(
        'vllm:request_inference_time_seconds',
        'Histogram of time spent in RUNNING phase for request.',
        REQUEST_LATENCY_BUCKETS,
      ),
      prefill: histogram(
        'vllm:request_prefill_time_seconds',
        'Histogram of time spent in PREFILL phase for request.',
        REQUEST_LATENCY_BUCKETS,
      ),
      decode: histogram(
        'vllm:request_decode_time_seconds',
        'Histogram of time spent in DECODE phase for request.',
        REQUEST_LATENCY_BUCKETS,
      ),
      prefillKvComputed: histogram(
        'vllm:request_prefill_kv_computed_tokens',
        'Histogram of new KV tokens computed during prefill (excluding cached tokens).',
        lengths,
      ),
    };
  }

  /** vLLM's PrometheusStatLogger.record for one IterationStats. */
  record(stats: IterationStats): void {
    const labels = this.#labels;
    const h = this.#h;
    const p = stats.promptTokens;
    this.#promptTokens.inc(labels, p.total);
    this.#promptBySource.inc(this.#sourceLabels.local_compute, p.computed);
    this.#promptBySource.inc(this.#sourceLabels.local_cache_hit, p.localCacheHit);
    this.#promptBySource.inc(this.#sourceLabels.external_kv_transfer, p.externalKvTransfer);
    this.#promptCached.inc(labels, p.cached);
    for (const source of CACHE_HIT_SOURCES)
      this.#cachedBySource.inc(this.#cachedSourceLabels[source], p.cachedBySource[source]);
    this.#promptRecomputed.inc(labels, p.recomputed);
    this.#generationTokens.inc(labels, stats.numGenerationTokens);
    if (stats.kind === 'step') h.iterationTokens.observe(labels, p.total + stats.numGenerationTokens);
    for (const v of stats.timeToFirstTokensSeconds) h.ttft.observe(labels, v);
    for (const v of stats.interTokenLatenciesSeconds) h.itl.observe(labels, v);
    for (const f of stats.finished) {
      this.#success.inc(this.#reasonLabelsOf(f.finishReason));
      h.e2e.observe(labels, f.e2eSeconds);
      if (f.timing) {
        h.queue.observe(labels, f.timing.queuedSeconds);
        if ('prefillSeconds' in f.timing) {
          h.prefill.observe(labels, f.timing.prefillSeconds);
          h.inference.observe(labels, f.timing.inferenceSeconds);
          h.decode.observe(labels, f.timing.decodeSeconds);
          if (f.timing.meanTimePerOutputTokenSeconds !== null)
            h.tpot.observe(labels, f.timing.meanTimePerOutputTokenSeconds);
        }
      }
      h.prefillKvComputed.observe(labels, f.numPromptTokens - Math.max(f.numCachedTokens, 0));
      h.promptTokens.observe(labels, f.numPromptTokens);
      h.generationTokens.observe(labels, f.numGenerationTokens);
      if (f.maxTokensParam) h.maxTokens.observe(labels, f.maxTokensParam);
    }
  }

  #reasonLabelsOf(reason: string): Labels {
    let labels = this.#reasonLabels.get(reason);
    if (!labels) {
      labels = { ...this.#labels, finished_reason: reason };
      this.#reasonLabels.set(reason, labels);
    }
    return labels;
  }
}
