/**
 * Prometheus metrics under vLLM's names, on a private Registry. Engine counters and gauges
 * are read from engine.stats() at scrape time (counters advance by the difference since
 * the previous scrape); latency histograms are observed as requests finish.
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { EngineStats, RequestOutputDelta } from '../engine/api.ts';
import { ConnectorMetrics } from './connector-metrics.ts';

const TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80,
];
const E2E_BUCKETS = [0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240];

type CounterKey =
  | 'promptTokensTotal'
  | 'generationTokensTotal'
  | 'prefixCacheQueriesTotal'
  | 'prefixCacheHitsTotal'
  | 'externalPrefixCacheQueriesTotal'
  | 'externalPrefixCacheHitsTotal';

const ENGINE_COUNTERS: ReadonlyArray<[string, string, CounterKey]> = [
  ['vllm:prompt_tokens_total', 'Number of prefill tokens processed.', 'promptTokensTotal'],
  ['vllm:generation_tokens_total', 'Number of generation tokens processed.', 'generationTokensTotal'],
  [
    'vllm:prefix_cache_queries_total',
    'Prefix cache queries, in terms of number of queried tokens.',
    'prefixCacheQueriesTotal',
  ],
  [
    'vllm:prefix_cache_hits_total',
    'Prefix cache hits, in terms of number of cached tokens.',
    'prefixCacheHitsTotal',
  ],
  [
    'vllm:external_prefix_cache_queries_total',
    'External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.',
    'externalPrefixCacheQueriesTotal',
  ],
  [
    'vllm:external_prefix_cache_hits_total',
    'External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.',
    'externalPrefixCacheHitsTotal',
  ],
];

export interface ServerMetricsOptions {
  modelName: string;
  /** Connector name from the engine's kv_transfer_config (its children for MultiConnector). */
  connectorName: string | null;
  connectorChildren?: readonly string[];
  /** Reads the engine's stats; called once per scrape. */
  readStats: () => EngineStats;
}

export class ServerMetrics {
  readonly registry = new Registry();
  readonly #labels: Record<string, string>;
  readonly #ttft: Histogram;
  readonly #e2e: Histogram;
  readonly #success: Counter;
  readonly #connector: ConnectorMetrics | null;
  readonly #connectorName: string | null;
  readonly #readStats: () => EngineStats;
  readonly #counters: Array<{ counter: Counter; key: CounterKey; last: number }> = [];
  readonly #running: Gauge;
  readonly #waiting: Gauge;
  readonly #kvUsage: Gauge;

  constructor(options: ServerMetricsOptions) {
    this.#labels = { model_name: options.modelName, engine: '0' };
    this.#readStats = options.readStats;
    this.#connectorName = options.connectorName;
    const labelNames = Object.keys(this.#labels);
    const registers = [this.registry];
    this.#running = new Gauge({
      name: 'vllm:num_requests_running',
      help: 'Number of requests in model execution batches.',
      labelNames,
      registers,
    });
    this.#waiting = new Gauge({
      name: 'vllm:num_requests_waiting',
      help: 'Number of requests waiting to be processed.',
      labelNames,
      registers,
    });
    this.#kvUsage = new Gauge({
      name: 'vllm:kv_cache_usage_perc',
      help: 'KV-cache usage. 1 means 100 percent usage.',
      labelNames,
      registers,
    });
    for (const [name, help, key] of ENGINE_COUNTERS) {
      const counter = new Counter({ name, help, labelNames, registers });
      counter.inc(this.#labels, 0);
      this.#counters.push({ counter, key, last: 0 });
    }
    this.#ttft = new Histogram({
      name: 'vllm:time_to_first_token_seconds',
      help: 'Histogram of time to first token in seconds.',
      labelNames,
      buckets: TTFT_BUCKETS,
      registers,
    });
    this.#e2e = new Histogram({
      name: 'vllm:e2e_request_latency_seconds',
      help: 'Histogram of e2e request latency in seconds.',
      labelNames,
      buckets: E2E_BUCKETS,
      registers,
    });
    this.#success = new Counter({
      name: 'vllm:request_success_total',
      help: 'Count of successfully processed requests.',
      labelNames: [...labelNames, 'finished_reason'],
      registers,
    });
    const names = options.connectorName ? [options.connectorName, ...(options.connectorChildren ?? [])] : [];
    this.#connector = names.length ? new ConnectorMetrics(this.registry, names, this.#labels) : null;
  }

  /** Records latency and outcome of one finished engine request. */
  observeFinished(delta: RequestOutputDelta): void {
    const m = delta.metrics;
    if (m.ttftMs !== null) this.#ttft.observe(this.#labels, m.ttftMs / 1000);
    if (m.e2eMs !== null) this.#e2e.observe(this.#labels, m.e2eMs / 1000);
    if (delta.finishReason === 'stop' || delta.finishReason === 'length' || delta.finishReason === 'abort') {
      this.#success.inc({ ...this.#labels, finished_reason: delta.finishReason });
    }
  }

  /** Pulls engine stats into the registry (connector stats are drained here, once). */
  refresh(): EngineStats {
    const stats = this.#readStats();
    this.#running.set(this.#labels, stats.numRequestsRunning);
    this.#waiting.set(this.#labels, stats.numRequestsWaiting);
    this.#kvUsage.set(this.#labels, stats.kvCacheUsage);
    for (const entry of this.#counters) {
      const now = stats[entry.key];
      if (now > entry.last) entry.counter.inc(this.#labels, now - entry.last);
      entry.last = Math.max(entry.last, now);
    }
    if (this.#connector && this.#connectorName)
      this.#connector.observe(this.#connectorName, stats.kvConnectorStats);
    return stats;
  }

  async render(): Promise<{ contentType: string; body: string }> {
    this.refresh();
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
