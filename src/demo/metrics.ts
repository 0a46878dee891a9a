/**
 * Reads the figures the demo reports from a server's Prometheus text (GET /metrics), as
 * totals over all label sets, and the difference between two readings. The transfer
 * figures come from the connector's own series (vllm:nixl_* or vllm:moriio_*); each engine
 * records only the transfers it posts, so the demo sums P and D.
 */
import { type DemoConnector, demoFlow } from './options.ts';

const ENGINE_METRICS = {
  /** Prompt tokens the engine computed itself (vLLM counts cached and transferred ones apart). */
  promptTokens: 'vllm:prompt_tokens_by_source_total{source="local_compute"}',
  prefixQueries: 'vllm:prefix_cache_queries_total',
  prefixHits: 'vllm:prefix_cache_hits_total',
  externalHits: 'vllm:external_prefix_cache_hits_total',
  kvUsage: 'vllm:kv_cache_usage_perc',
  running: 'vllm:num_requests_running',
  waiting: 'vllm:num_requests_waiting',
} as const;

/** The NIXL connectors' series (the default names). */
export const DEMO_METRICS = {
  kvBytes: 'vllm:nixl_bytes_transferred_sum',
  transfers: 'vllm:nixl_bytes_transferred_count',
  /** The time on the wire (kvconnect's series): without a READ's wait for P's grant or for the connection's setup. */
  transferSeconds: 'vllm:nixl_xfer_wire_time_seconds_sum',
  failedTransfers: 'vllm:nixl_num_failed_transfers_total',
  /** P gave up on blocks it held for D (NIXL: the lease expired). */
  abandonedHolds: 'vllm:nixl_num_kv_expired_reqs_total',
  ...ENGINE_METRICS,
} as const;

/** MoRIIOConnector's series (kvconnect's names; P records WRITE transfers, D records READ). */
export const MORIIO_DEMO_METRICS: DemoMetricNames = {
  kvBytes: 'vllm:moriio_bytes_transferred_sum',
  transfers: 'vllm:moriio_bytes_transferred_count',
  transferSeconds: 'vllm:moriio_xfer_time_seconds_sum',
  failedTransfers: 'vllm:moriio_num_failed_transfers_total',
  /** MoRIIO: the hold was reaped after defer_timeout without an ACK. */
  abandonedHolds: 'vllm:moriio_num_reaped_sends_total',
  ...ENGINE_METRICS,
};

export type MetricKey = keyof typeof DEMO_METRICS;
export type MetricReading = Record<MetricKey, number>;
export type DemoMetricNames = Record<MetricKey, string>;

/** The series the demo reads for a connector's servers. */
export function demoMetricNames(connector: DemoConnector): DemoMetricNames {
  return demoFlow(connector) === 'MoRIIOConnector' ? MORIIO_DEMO_METRICS : DEMO_METRICS;
}

/**
 * Sum of every sample named exactly `name` (any labels); 0 when the metric is absent. A
 * selector `name{label="value",...}` keeps only the samples that carry those labels.
 */
export function sumMetric(text: string, name: string): number {
  const brace = name.indexOf('{');
  const base = brace < 0 ? name : name.slice(0, brace);
  const required =
    brace < 0
      ? []
      : name
          .slice(brace + 1, -1)
          .split(',')
          .filter(Boolean);
  let total = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const rest = line.startsWith(`${base}{`) || line.startsWith(`${base} `) ? line.slice(base.length) : null;
    if (rest === null) continue;
    const labels = rest.startsWith('{') ? rest.slice(1, rest.indexOf('}')).split(',') : [];
    if (!required.every((r) => labels.includes(r))) continue;
    const value = Number(rest.slice(rest.lastIndexOf(' ') + 1));
    if (Number.isFinite(value)) total += value;
  }
  return total;
}

export function parseReading(text: string, names: DemoMetricNames = DEMO_METRICS): MetricReading {
  const out = {} as MetricReading;
  for (const key of Object.keys(names) as MetricKey[]) out[key] = sumMetric(text, names[key]);
  return out;
}

export async function readMetrics(
  baseUrl: string,
  names: DemoMetricNames = DEMO_METRICS,
): Promise<MetricReading> {
  const res = await fetch(`${baseUrl}/metrics`);
  return parseReading(await res.text(), names);
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
