/**
 * The hook through which connectors declare their Prometheus metrics (vLLM's
 * build_prom_metrics): a connector name maps to specs that say which key of its stats
 * data (EngineStats.kvConnectorStats) feeds which metric. Arrays are per-event samples
 * (a histogram observes each; a counter adds one per entry); numbers are observed or added
 * once. MultiConnector stats ({childName: data}) are dispatched to each child's specs.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

export interface ConnectorMetricSpec {
  name: string;
  help: string;
  type: 'histogram' | 'counter' | 'gauge';
  /** Key in the connector's stats data. */
  key: string;
  buckets?: number[];
  /** Multiplier applied to every value (e.g. 1e-3 for ms → s). */
  scale?: number;
}

const declarations = new Map<string, readonly ConnectorMetricSpec[]>();

/** Declares (or replaces) the metrics of `connectorName`. Call before the server starts. */
export function registerConnectorMetrics(connectorName: string, specs: readonly ConnectorMetricSpec[]): void {
  declarations.set(connectorName, specs);
}

export function connectorMetricSpecs(connectorName: string): readonly ConnectorMetricSpec[] {
  return declarations.get(connectorName) ?? [];
}

const SECONDS_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 5];
const BYTES_BUCKETS = [
  2 ** 10,
  2 ** 14,
  2 ** 16,
  2 ** 18,
  2 ** 20,
  2 ** 22,
  2 ** 24,
  2 ** 26,
  2 ** 28,
  2 ** 30,
];
const COUNT_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384];

const NIXL_METRICS: readonly ConnectorMetricSpec[] = [
  {
    name: 'vllm:nixl_xfer_time_seconds',
    help: 'Histogram of transfer duration for NIXL KV cache transfers.',
    type: 'histogram',
    key: 'transfer_duration',
    buckets: SECONDS_BUCKETS,
  },
  {
    name: 'vllm:nixl_xfer_wire_time_seconds',
    help: 'kvconnect: NIXL transfer duration minus the time the peer held a READ before serving it (waiting for its grant).',
    type: 'histogram',
    key: 'wire_duration',
    buckets: SECONDS_BUCKETS,
  },
  {
    name: 'vllm:nixl_post_time_seconds',
    help: 'Histogram of transfer post time for NIXL KV cache transfers.',
    type: 'histogram',
    key: 'post_duration',
    buckets: SECONDS_BUCKETS,
  },
  {
    name: 'vllm:nixl_bytes_transferred',
    help: 'Histogram of bytes transferred per NIXL KV cache transfer.',
    type: 'histogram',
    key: 'bytes_transferred',
    buckets: BYTES_BUCKETS,
  },
  {
    name: 'vllm:nixl_num_descriptors',
    help: 'Histogram of number of descriptors per NIXL KV cache transfer.',
    type: 'histogram',
    key: 'num_descriptors',
    buckets: COUNT_BUCKETS,
  },
  {
    name: 'vllm:nixl_num_failed_transfers',
    help: 'Number of failed NIXL KV cache transfers.',
    type: 'counter',
    key: 'num_failed_transfers',
  },
  {
    name: 'vllm:nixl_num_failed_notifications',
    help: 'Number of failed NIXL KV cache notifications.',
    type: 'counter',
    key: 'num_failed_notifications',
  },
  {
    name: 'vllm:nixl_num_kv_expired_reqs',
    help: 'Number of requests whose KV blocks expired before the decode side read them.',
    type: 'counter',
    key: 'num_kv_expired_reqs',
  },
];
registerConnectorMetrics('NixlConnector', NIXL_METRICS);
registerConnectorMetrics('NixlPullConnector', NIXL_METRICS);
registerConnectorMetrics('NixlPushConnector', NIXL_METRICS);

/**
 * kvconnect's own names: vLLM's MoRIIO connector has no Prometheus metrics. Same shapes as
 * NIXL's; a transfer is observed on the engine that posts it (P in WRITE mode, D in READ).
 */
const MORIIO_METRICS: readonly ConnectorMetricSpec[] = [
  {
    name: 'vllm:moriio_xfer_time_seconds',
    help: 'Histogram of transfer duration for MoRIIO KV cache transfers.',
    type: 'histogram',
    key: 'transfer_duration',
    buckets: SECONDS_BUCKETS,
  },
  {
    name: 'vllm:moriio_bytes_transferred',
    help: 'Histogram of bytes transferred per MoRIIO KV cache transfer.',
    type: 'histogram',
    key: 'bytes_transferred',
    buckets: BYTES_BUCKETS,
  },
  {
    name: 'vllm:moriio_num_descriptors',
    help: 'Histogram of number of descriptors per MoRIIO KV cache transfer.',
    type: 'histogram',
    key: 'num_descriptors',
    buckets: COUNT_BUCKETS,
  },
  {
    name: 'vllm:moriio_num_failed_transfers',
    help: 'Number of failed MoRIIO KV cache transfers.',
    type: 'counter',
    key: 'num_failed_transfers',
  },
  {
    name: 'vllm:moriio_num_failed_notifications',
    help: 'Number of MoRIIO control messages (remote_blocks, write_done, release) that failed.',
    type: 'counter',
    key: 'num_failed_notifications',
  },
  {
    name: 'vllm:moriio_num_transfer_timeouts',
    help: 'Number of MoRIIO KV cache transfers that ran past transfer_timeout.',
    type: 'counter',
    key: 'num_transfer_timeouts',
  },
  {
    name: 'vllm:moriio_num_reaped_sends',
    help: 'Number of prefill requests whose held blocks were freed after defer_timeout without an ACK.',
    type: 'counter',
    key: 'num_reaped_sends',
  },
];
registerConnectorMetrics('MoRIIOConnector', MORIIO_METRICS);

type LabelValues = Record<string, string>;
/** `scalar`: the stats value was one number (a total), not a list of per-event samples. */
type Sink = (values: number[], scalar: boolean) => void;

function samples(value: unknown, scale: number): number[] | null {
  if (typeof value === 'number' && Number.isFinite(value)) return [value * scale];
  if (Array.isArray(value))
    return value
      .filter((v): v is number => typeof v === 'number' && Number.isFinite(v))
      .map((v) => v * scale);
  return null;
}

/** The live metrics of one connector (or of each MultiConnector child). */
export class ConnectorMetrics {
  readonly #sinks = new Map<string, Array<{ key: string; scale: number; sink: Sink }>>();

  constructor(registry: Registry, connectorNames: readonly string[], labels: LabelValues) {
    const labelNames = Object.keys(labels);
    const created = new Map<string, Sink>();
    for (const connector of connectorNames) {
      const sinks: Array<{ key: string; scale: number; sink: Sink }> = [];
      for (const spec of connectorMetricSpecs(connector)) {
        let sink = created.get(spec.name);
        if (!sink) {
          sink = makeSink(registry, spec, labelNames, labels);
          created.set(spec.name, sink);
        }
        sinks.push({ key: spec.key, scale: spec.scale ?? 1, sink });
      }
      this.#sinks.set(connector, sinks);
    }
  }

  /** Records one stats payload of `connectorName` (MultiConnector payloads are split by child). */
  observe(connectorName: string, data: Record<string, unknown> | null): void {
    if (!data) return;
    const own = this.#sinks.get(connectorName);
    if (own && own.length > 0) {
      for (const { key, scale, sink } of own) {
        const values = samples(data[key], scale);
        if (values) sink(values, typeof data[key] === 'number');
      }
      return;
    }
    for (const [child, childData] of Object.entries(data)) {
      if (
        this.#sinks.has(child) &&
        typeof childData === 'object' &&
        childData !== null &&
        !Array.isArray(childData)
      ) {
        this.observe(child, childData as Record<string, unknown>);
      }
    }
  }
}

function makeSink(
  registry: Registry,
  spec: ConnectorMetricSpec,
  labelNames: string[],
  labels: LabelValues,
): Sink {
  const common = { name: spec.name, help: spec.help, labelNames, registers: [registry] };
  switch (spec.type) {
    case 'histogram': {
      const h = new Histogram({ ...common, ...(spec.buckets ? { buckets: spec.buckets } : {}) });
      return (values) => {
        for (const v of values) h.observe(labels, v);
      };
    }
    case 'counter': {
      const c = new Counter(common);
      c.inc(labels, 0);
      return (values, scalar) => c.inc(labels, scalar ? Math.max(0, values[0]!) : values.length);
    }
    case 'gauge': {
      const g = new Gauge(common);
      return (values) => {
        const last = values.at(-1);
        if (last !== undefined) g.set(labels, last);
      };
    }
  }
}
