/**
 * `--fake-metrics` served (llm-d-inference-sim's semantics): while set, GET /metrics reports
 * the fake values only, never mixed with the engine's, under vLLM's family names, label sets
 * and buckets — a full ServerMetrics of its own, fed from the spec instead of the engine.
 * Gauges given as functions of time are recomputed every refresh interval, counting from when
 * fake metrics were first set; histograms get each bucket's count as observations of the
 * bucket's upper bound (the +Inf bucket: the last bound + 1), as the sim does.
 */
import type { Counter, Histogram } from 'prom-client';
import { configError } from '../config/config-error.ts';
import {
  type FakeBucketKey,
  type FakeMetricsSpec,
  type FakeValue,
  fakeValueAt,
} from '../config/fake-metrics.ts';
import type { EngineStats } from '../engine/api.ts';
import {
  buckets125,
  REQUEST_LATENCY_BUCKETS,
  TOKEN_LATENCY_BUCKETS,
  TTFT_BUCKETS,
} from './iteration-metrics.ts';
import { loraRequestsInfoGauge, setLoraRequestsInfo } from './lora-requests-info.ts';
import { engineLabels, ServerMetrics, type ServerMetricsOptions } from './metrics.ts';

export interface FakeMetricsOptions extends Omit<ServerMetricsOptions, 'readStats' | 'connectorMetrics'> {
  /** vllm:lora_requests_info's max_lora label. */
  maxLora: number;
  /** How often function-valued gauges are recomputed, in ms. */
  refreshMs: number;
}

/** Which vLLM histogram each of the sim's bucket lists fills, and its bounds. */
function histogramOf(key: FakeBucketKey, maxModelLen: number): { name: string; bounds: number[] } {
  const lengths = buckets125(maxModelLen);
  const table: Record<FakeBucketKey, [string, number[]]> = {
    'ttft-buckets-values': ['vllm:time_to_first_token_seconds', TTFT_BUCKETS],
    // The sim's TPOT list fills the inter-token latency (vLLM's successor of time_per_output_token).
    'tpot-buckets-values': ['vllm:inter_token_latency_seconds', TOKEN_LATENCY_BUCKETS],
    'request-tpot-buckets-values': ['vllm:request_time_per_output_token_seconds', TOKEN_LATENCY_BUCKETS],
    'e2erl-buckets-values': ['vllm:e2e_request_latency_seconds', REQUEST_LATENCY_BUCKETS],
    'queue-time-buckets-values': ['vllm:request_queue_time_seconds', REQUEST_LATENCY_BUCKETS],
    'inf-time-buckets-values': ['vllm:request_inference_time_seconds', REQUEST_LATENCY_BUCKETS],
    'prefill-time-buckets-values': ['vllm:request_prefill_time_seconds', REQUEST_LATENCY_BUCKETS],
    'decode-time-buckets-values': ['vllm:request_decode_time_seconds', REQUEST_LATENCY_BUCKETS],
    'request-prompt-tokens': ['vllm:request_prompt_tokens', lengths],
    'request-generation-tokens': ['vllm:request_generation_tokens', lengths],
    'request-params-max-tokens': ['vllm:request_params_max_tokens', lengths],
    'request-max-generation-tokens': ['vllm:request_max_num_generation_tokens', lengths],
  };
  const [name, bounds] = table[key];
  return { name, bounds };
}

type GaugeValues = { running: number; waiting: number; usage: number };

export class FakeMetrics {
  readonly #options: FakeMetricsOptions;
  readonly #startedAt = performance.now();
  #spec: FakeMetricsSpec;
  #metrics: ServerMetrics;
  #values: GaugeValues = { running: 0, waiting: 0, usage: 0 };
  #timer: NodeJS.Timeout | null = null;

  /** Throws a config error naming the field when the spec does not fit the families. */
  constructor(spec: FakeMetricsSpec, options: FakeMetricsOptions) {
    this.#options = options;
    this.#spec = spec;
    this.#metrics = this.#build(spec);
    this.#schedule();
  }

  get spec(): FakeMetricsSpec {
    return this.#spec;
  }

  get refreshMs(): number {
    return this.#options.refreshMs;
  }

  get metrics(): ServerMetrics {
    return this.#metrics;
  }

  /**
   * Validates a new spec in full and returns the function that swaps it in; throws (keeping
   * the current one) when it does not fit. The time base of functions carries on.
   */
  prepare(spec: FakeMetricsSpec): () => void {
    const next = this.#build(spec);
    return () => {
      this.#spec = spec;
      this.#metrics = next;
      this.#schedule();
    };
  }

  close(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
  }

  #build(spec: FakeMetricsSpec): ServerMetrics {
    const o = this.#options;
    const metrics = new ServerMetrics({
      modelName: o.modelName,
      engineIndex: o.engineIndex ?? 0,
      maxModelLen: o.maxModelLen,
      cacheInfo: o.cacheInfo,
      connectorMetrics: [],
      readStats: () => this.#stats(),
    });
    const labels = engineLabels(o);
    const sums: Partial<Record<FakeBucketKey, number>> = {};
    for (const [key, counts] of Object.entries(spec.buckets) as Array<[FakeBucketKey, number[]]>) {
      const { name, bounds } = histogramOf(key, o.maxModelLen);
      if (counts.length > bounds.length + 1) {
        throw configError(
          `fake-metrics.${key}`,
          `at most ${bounds.length + 1} per-bucket counts (${name} has ${bounds.length} bounds and +Inf)`,
          counts,
          `Drop the trailing ${counts.length - bounds.length - 1} count(s); missing trailing buckets count 0.`,
        );
      }
      const histogram = metrics.registry.getSingleMetric(name) as Histogram;
      let sum = 0;
      counts.forEach((n, i) => {
        const value = i < bounds.length ? (bounds[i] as number) : (bounds[bounds.length - 1] as number) + 1;
        for (let k = 0; k < n; k++) histogram.observe(labels, value);
        sum += n * value;
      });
      sums[key] = sum;
    }
    const counter = (name: string): Counter => metrics.registry.getSingleMetric(name) as Counter;
    const prompt = spec.totals['total-prompt-tokens'] ?? sums['request-prompt-tokens'];
    if (prompt !== undefined) counter('vllm:prompt_tokens_total').inc(labels, prompt);
    const generation = spec.totals['total-generation-tokens'] ?? sums['request-generation-tokens'];
    if (generation !== undefined) counter('vllm:generation_tokens_total').inc(labels, generation);
    for (const [reason, n] of Object.entries(spec.requestSuccessTotal ?? {})) {
      counter('vllm:request_success_total').inc({ ...labels, finished_reason: reason }, n);
    }
    if (spec.loras) {
      const rows =
        spec.loras.length > 0 ? spec.loras : [{ running: '', waiting: '', timestamp: Date.now() / 1000 }];
      setLoraRequestsInfo(loraRequestsInfoGauge(metrics.registry), o.maxLora, rows);
    }
    return metrics;
  }

  #stats(): EngineStats {
    const { running, waiting, usage } = this.#values;
    return {
      numRequestsRunning: running,
      numRequestsWaiting: waiting,
      kvCacheUsage: usage,
      promptTokensTotal: 0,
      generationTokensTotal: 0,
      prefixCacheQueriesTotal: this.#spec.totals['prefix-cache-queries'] ?? 0,
      prefixCacheHitsTotal: this.#spec.totals['prefix-cache-hits'] ?? 0,
      externalPrefixCacheQueriesTotal: 0,
      externalPrefixCacheHitsTotal: 0,
      numPreemptionsTotal: 0,
      numRequestsWaitingForRemoteKvs: 0,
      kvConnectorStats: null,
    };
  }

  /** Recomputes the gauges (requests as whole numbers, as the sim rounds them). */
  #tick(): void {
    const elapsedNs = (performance.now() - this.#startedAt) * 1e6;
    const at = (v: FakeValue | undefined, whole: boolean): number => {
      if (!v) return 0;
      const x = fakeValueAt(v, elapsedNs);
      return whole ? Math.trunc(x) : x;
    };
    const g = this.#spec.gauges;
    this.#values = {
      running: at(g['running-requests'], true),
      waiting: at(g['waiting-requests'], true),
      usage: at(g['kv-cache-usage'], false),
    };
  }

  #schedule(): void {
    this.#tick();
    const dynamic = Object.values(this.#spec.gauges).some((v) => v?.kind === 'function');
    if (dynamic && !this.#timer) {
      this.#timer = setInterval(() => this.#tick(), this.#options.refreshMs);
      this.#timer.unref();
    } else if (!dynamic) {
      this.close();
    }
  }
}
