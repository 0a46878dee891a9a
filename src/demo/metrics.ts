/**
 * Reads the figures the demo reports from a server's Prometheus text (GET /metrics), as
 * totals over all label sets, and the difference between two readings.
 */

export const DEMO_METRICS = {
  kvBytes: 'vllm:nixl_bytes_transferred_sum',
  transfers: 'vllm:nixl_bytes_transferred_count',
  transferSeconds: 'vllm:nixl_xfer_time_seconds_sum',
  failedTransfers: 'vllm:nixl_num_failed_transfers',
  expiredLeases: 'vllm:nixl_num_kv_expired_reqs',
  promptTokens: 'vllm:prompt_tokens_total',
  prefixQueries: 'vllm:prefix_cache_queries_total',
  prefixHits: 'vllm:prefix_cache_hits_total',
  externalHits: 'vllm:external_prefix_cache_hits_total',
  kvUsage: 'vllm:kv_cache_usage_perc',
  running: 'vllm:num_requests_running',
  waiting: 'vllm:num_requests_waiting',
} as const;

export type MetricKey = keyof typeof DEMO_METRICS;
export type MetricReading = Record<MetricKey, number>;

/** Sum of every sample named exactly `name` (any labels); 0 when the metric is absent. */
export function sumMetric(text: string, name: string): number {
  let total = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const rest = line.startsWith(`${name}{`) || line.startsWith(`${name} `) ? line.slice(name.length) : null;
    if (rest === null) continue;
    const value = Number(rest.slice(rest.lastIndexOf(' ') + 1));
    if (Number.isFinite(value)) total += value;
  }
  return total;
}

export function parseReading(text: string): MetricReading {
  const out = {} as MetricReading;
  for (const key of Object.keys(DEMO_METRICS) as MetricKey[]) out[key] = sumMetric(text, DEMO_METRICS[key]);
  return out;
}

export async function readMetrics(baseUrl: string): Promise<MetricReading> {
  const res = await fetch(`${baseUrl}/metrics`);
  return parseReading(await res.text());
}

/** after − before for counters; gauges (usage, running, waiting) keep the later value. */
export function metricDelta(before: MetricReading, after: MetricReading): MetricReading {
  const out = {} as MetricReading;
  for (const key of Object.keys(DEMO_METRICS) as MetricKey[]) {
    const gauge = key === 'kvUsage' || key === 'running' || key === 'waiting';
    out[key] = gauge ? after[key] : after[key] - before[key];
  }
  return out;
}
