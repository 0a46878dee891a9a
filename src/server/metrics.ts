/**
 * Prometheus metrics under vLLM's names (labels model_name and engine), on a private
 * Registry. Per-request and per-step families are fed by the engine's iteration stats as
 * they happen (iteration-metrics.ts), with the connector's stats of each step; scheduler
 * gauges and the cache counters are read from engine.stats() at scrape time (a counter
 * advances by the difference since the previous scrape).
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { pythonStr } from '../config/config-error.ts';
import type { EmulationConfig } from '../config/emulation-config.ts';
import type { CacheConfig } from '../config/types.ts';
import type { ConnectorMetricSpec } from '../connector/metric-specs.ts';
import type { EngineStats, IterationStats } from '../engine/api.ts';
import { ConnectorMetrics } from './connector-metrics.ts';
import { emulatedLinkMetricSpecs, registerEmulationMetrics } from './emulation-metrics.ts';
import { HIDDEN_METRICS, showHiddenMetrics } from './hidden-metrics.ts';
import { buckets125, IterationMetrics } from './iteration-metrics.ts';
import { loraRequestsInfoGauge, setLoraRequestsInfo } from './lora-requests-info.ts';
import { toPythonExposition } from './python-exposition.ts';

const KV_FETCH_STAGES = ['waiting_to_start', 'in_progress', 'completed_waiting'] as const;

type CounterKey =
  | 'prefixCacheQueriesTotal'
  | 'prefixCacheHitsTotal'
  | 'externalPrefixCacheQueriesTotal'
  | 'externalPrefixCacheHitsTotal'
  | 'numPreemptionsTotal';

const SCRAPED_COUNTERS: ReadonlyArray<[string, string, CounterKey]> = [
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
  ['vllm:num_preemptions_total', 'Cumulative number of preemption from the engine.', 'numPreemptionsTotal'],
];

export interface ServerMetricsOptions {
  modelName: string;
  maxModelLen: number;
  /**
   * The `engine` label: the engine's data-parallel rank, as vLLM labels each engine it manages
   * (0 without data parallelism).
   */
  engineIndex?: number;
  /** Feeds vllm:cache_config_info (vLLM's CacheConfig.metrics_info()). */
  cacheInfo: Record<string, string>;
  /** The metrics the engine's connector class declares (none without a connector). */
  connectorMetrics: readonly ConnectorMetricSpec[];
  /** Reads the engine's stats; called once per scrape. */
  readStats: () => EngineStats;
  /** The emulated deployment, stated as kvconnect:* series (none when not emulating). */
  emulation?: EmulationConfig | null;
  /** --max-loras when LoRA is enabled: serves vllm:lora_requests_info. */
  maxLoras?: number | null;
  /** --show-hidden-metrics-for-version (checked); null: hidden metrics stay hidden. */
  showHiddenMetricsForVersion?: string | null;
  /** The families the flag shows (vLLM's list by default). */
  hiddenMetrics?: readonly string[];
}

/** vLLM's cache_config_info labels for kvconnect's cache config (Python str() of each value). */
export function cacheConfigInfo(cache: CacheConfig, numGpuBlocks: number | null): Record<string, string> {
  return {
    block_size: pythonStr(cache.blockSize),
    cache_dtype: pythonStr(cache.cacheDtype),
    enable_prefix_caching: pythonStr(cache.enablePrefixCaching),
    prefix_caching_hash_algo: pythonStr(cache.prefixCachingHashAlgo),
    kv_cache_memory_bytes: pythonStr(cache.kvCacheMemoryBytes),
    num_gpu_blocks_override: pythonStr(cache.numGpuBlocks),
    num_gpu_blocks: pythonStr(numGpuBlocks),
    num_cpu_blocks: 'None',
    kv_offloading_size: pythonStr(cache.kvOffloadingSize),
    kv_offloading_backend: pythonStr(cache.kvOffloadingBackend),
  };
}

/** The labels every vLLM family carries: model_name and engine. */
export function engineLabels(options: Pick<ServerMetricsOptions, 'modelName' | 'engineIndex'>): {
  model_name: string;
  engine: string;
} {
  return { model_name: options.modelName, engine: String(options.engineIndex ?? 0) };
}

export class ServerMetrics {
  readonly registry = new Registry();
  readonly #labels: Record<string, string>;
  readonly #iterations: IterationMetrics;
  readonly #connector: ConnectorMetrics | null;
  readonly #readStats: () => EngineStats;
  readonly #counters: Array<{ counter: Counter; key: CounterKey; last: number }> = [];
  readonly #gauges: Record<'running' | 'waiting' | 'usage', Gauge>;
  readonly #waitingByReason: Gauge;
  readonly #kvFetchByStage: Gauge;
  readonly #maxGenerationTokens: Histogram;
  readonly #paramsN: Histogram;
  readonly #sleep: Gauge;
  /** vllm:lora_requests_info and its max_lora, with --enable-lora. */
  readonly #lora: { gauge: Gauge; maxLora: number } | null;

  constructor(options: ServerMetricsOptions) {
    this.#labels = engineLabels(options);
    this.#readStats = options.readStats;
    const labels = this.#labels;
    const labelNames = Object.keys(labels);
    const registers = [this.registry];
    const gauge = (name: string, help: string): Gauge => new Gauge({ name, help, labelNames, registers });
    this.#gauges = {
      running: gauge('vllm:num_requests_running', 'Number of requests in model execution batches.'),
      waiting: gauge('vllm:num_requests_waiting', 'Number of requests waiting to be processed.'),
      usage: gauge('vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.'),
    };
    this.#waitingByReason = new Gauge({
      name: 'vllm:num_requests_waiting_by_reason',
      help:
        "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; " +
        "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). " +
        'Sum of all reasons equals vllm:num_requests_waiting.',
      labelNames: [...labelNames, 'reason'],
      registers,
    });
    this.#kvFetchByStage = new Gauge({
      name: 'vllm:num_requests_kv_fetch_by_stage',
      help:
        "Number of requests fetching KV from a remote source, by stage. Stage labels: 'waiting_to_start' = " +
        "will fetch but no transfer started yet; 'in_progress' = receiving KV; 'completed_waiting' = " +
        'received and waiting to be scheduled.',
      labelNames: [...labelNames, 'stage'],
      registers,
    });
    for (const stage of KV_FETCH_STAGES) this.#kvFetchByStage.set({ ...labels, stage }, 0);
    const lengths = buckets125(options.maxModelLen);
    this.#maxGenerationTokens = new Histogram({
      name: 'vllm:request_max_num_generation_tokens',
      help: 'Histogram of maximum number of requested generation tokens.',
      labelNames,
      buckets: lengths,
      registers,
    });
    this.#maxGenerationTokens.zero(labels);
    this.#paramsN = new Histogram({
      name: 'vllm:request_params_n',
      help: 'Histogram of the n request parameter.',
      labelNames,
      buckets: [1, 2, 5, 10, 20],
      registers,
    });
    this.#paramsN.zero(labels);
    this.#sleep = new Gauge({
      name: 'vllm:engine_sleep_state',
      help:
        'Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; ' +
        'weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.',
      labelNames: [...labelNames, 'sleep_state'],
      registers,
    });
    this.#setSleepLevel(0);
    for (const [name, help, key] of SCRAPED_COUNTERS) {
      const counter = new Counter({ name, help, labelNames, registers });
      counter.inc(labels, 0);
      this.#counters.push({ counter, key, last: 0 });
    }
    this.#iterations = new IterationMetrics(this.registry, labels, options.maxModelLen);
    const info = { ...options.cacheInfo, engine: labels.engine };
    new Gauge({
      name: 'vllm:cache_config_info',
      help: 'Information of the LLMEngine CacheConfig',
      labelNames: Object.keys(info),
      registers,
    }).set(info, 1);
    registerEmulationMetrics(this.registry, labels, options.emulation ?? null);
    this.#lora =
      options.maxLoras !== undefined && options.maxLoras !== null
        ? { gauge: loraRequestsInfoGauge(this.registry), maxLora: options.maxLoras }
        : null;
    const connectorSpecs = [
      ...options.connectorMetrics,
      ...emulatedLinkMetricSpecs(options.emulation ?? null),
    ];
    this.#connector =
      connectorSpecs.length > 0 ? new ConnectorMetrics(this.registry, connectorSpecs, labels) : null;
    if (!showHiddenMetrics(options.showHiddenMetricsForVersion ?? null))
      for (const name of options.hiddenMetrics ?? HIDDEN_METRICS) this.registry.removeSingleMetric(name);
  }

  /** Records one engine iteration (request latencies, token counts, connector stats). */
  recordIteration(stats: IterationStats): void {
    this.#iterations.record(stats);
    // vLLM's logger sets the row of the current adapters to the current time every iteration.
    if (this.#lora && stats.loraAdapters) {
      const { running, waiting } = stats.loraAdapters;
      setLoraRequestsInfo(this.#lora.gauge, this.#lora.maxLora, [
        { running, waiting, timestamp: Date.now() / 1000 },
      ]);
    }
    this.#observeConnector(stats.kvConnectorStats);
  }

  /**
   * A finished prompt of a request (vLLM's parent request): the most tokens any of its n
   * choices generated, and n.
   */
  observeFinishedPrompt(n: number, maxGenerationTokens: number): void {
    this.#maxGenerationTokens.observe(this.#labels, maxGenerationTokens);
    this.#paramsN.observe(this.#labels, n);
  }

  /** vLLM's record_sleep_state: awake, or the level the engine sleeps at. */
  #setSleepLevel(level: 0 | 1 | 2): void {
    const labels = this.#labels;
    this.#sleep.set({ ...labels, sleep_state: 'awake' }, level === 0 ? 1 : 0);
    this.#sleep.set({ ...labels, sleep_state: 'weights_offloaded' }, level === 1 ? 1 : 0);
    this.#sleep.set({ ...labels, sleep_state: 'discard_all' }, level === 2 ? 1 : 0);
  }

  /** Pulls the engine's gauges and counters into the registry. */
  refresh(): EngineStats {
    const stats = this.#readStats();
    const labels = this.#labels;
    this.#gauges.running.set(labels, stats.numRequestsRunning);
    this.#gauges.waiting.set(labels, stats.numRequestsWaiting);
    this.#gauges.usage.set(labels, stats.kvCacheUsage);
    this.#setSleepLevel(stats.sleepLevel ?? 0);
    const deferred = Math.min(
      stats.numRequestsWaitingForRemoteKvs + (stats.numRequestsWaitingForLora ?? 0),
      stats.numRequestsWaiting,
    );
    this.#waitingByReason.set({ ...labels, reason: 'capacity' }, stats.numRequestsWaiting - deferred);
    this.#waitingByReason.set({ ...labels, reason: 'deferred' }, deferred);
    for (const stage of KV_FETCH_STAGES)
      this.#kvFetchByStage.set({ ...labels, stage }, stats.kvFetchByStage?.[stage] ?? 0);
    for (const entry of this.#counters) {
      const now = stats[entry.key];
      if (now > entry.last) entry.counter.inc(labels, now - entry.last);
      entry.last = Math.max(entry.last, now);
    }
    // Engines without an iteration listener hand the connector's stats over here.
    this.#observeConnector(stats.kvConnectorStats);
    return stats;
  }

  async render(): Promise<{ contentType: string; body: string }> {
    this.refresh();
    return {
      contentType: this.registry.contentType,
      body: toPythonExposition(await this.registry.metrics()),
    };
  }

  #observeConnector(data: Record<string, unknown> | null): void {
    this.#connector?.observe(data);
  }
}
