/**
 * The hook through which connectors declare their Prometheus metrics (vLLM's
 * build_prom_metrics): a connector name maps to specs that say which key of its stats
 * data feeds which metric. Arrays are per-event samples (a histogram observes each, a
 * counter adds each, as vLLM's observe() does); a number is one sample. With `by`, the key
 * holds {label value: samples} and each entry is its own series. MultiConnector stats
 * ({childName: data}) are dispatched to each child's specs.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { BUILTIN_CONNECTOR_METRICS, type ConnectorMetricSpec } from './connector-metric-specs.ts';

export type { ConnectorMetricSpec } from './connector-metric-specs.ts';

const declarations = new Map<string, readonly ConnectorMetricSpec[]>(
  Object.entries(BUILTIN_CONNECTOR_METRICS),
);

/** Declares (or replaces) the metrics of `connectorName`. Call before the server starts. */
export function registerConnectorMetrics(connectorName: string, specs: readonly ConnectorMetricSpec[]): void {
  declarations.set(connectorName, specs);
}

export function connectorMetricSpecs(connectorName: string): readonly ConnectorMetricSpec[] {
  return declarations.get(connectorName) ?? [];
}

type LabelValues = Record<string, string>;
type Sink = (values: readonly number[], labels: LabelValues) => void;

interface BoundSpec {
  spec: ConnectorMetricSpec;
  sink: Sink;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function samples(value: unknown, spec: ConnectorMetricSpec): number[] {
  const scale = spec.scale ?? 1;
  const list = Array.isArray(value) ? value : [value];
  const out: number[] = [];
  for (const item of list) {
    const v = spec.field !== undefined && isRecord(item) ? item[spec.field] : item;
    if (typeof v === 'number' && Number.isFinite(v)) out.push(v * scale);
  }
  return out;
}

/** The live metrics of one connector (or of each MultiConnector child). */
export class ConnectorMetrics {
  readonly #bound = new Map<string, BoundSpec[]>();
  readonly #labels: LabelValues;

  constructor(registry: Registry, connectorNames: readonly string[], labels: LabelValues) {
    this.#labels = labels;
    const created = new Map<string, Sink>();
    for (const connector of connectorNames) {
      const bound: BoundSpec[] = [];
      for (const spec of connectorMetricSpecs(connector)) {
        let sink = created.get(spec.name);
        if (!sink) {
          sink = makeSink(registry, spec, labels);
          created.set(spec.name, sink);
        }
        bound.push({ spec, sink });
      }
      this.#bound.set(connector, bound);
    }
  }

  /** Records one stats payload of `connectorName` (MultiConnector payloads are split by child). */
  observe(connectorName: string, data: Record<string, unknown> | null): void {
    if (!data) return;
    const own = this.#bound.get(connectorName);
    if (own && own.length > 0) {
      for (const { spec, sink } of own) {
        const value = data[spec.key];
        if (value === undefined) continue;
        if (spec.by === undefined) {
          sink(samples(value, spec), this.#labels);
        } else if (isRecord(value)) {
          for (const [labelValue, entries] of Object.entries(value))
            sink(samples(entries, spec), { ...this.#labels, [spec.by]: labelValue });
        }
      }
      return;
    }
    for (const [child, childData] of Object.entries(data)) {
      if (this.#bound.has(child) && isRecord(childData)) this.observe(child, childData);
    }
  }
}

function makeSink(registry: Registry, spec: ConnectorMetricSpec, labels: LabelValues): Sink {
  const labelNames = [...Object.keys(labels), ...(spec.by === undefined ? [] : [spec.by])];
  const common = { name: spec.name, help: spec.help, labelNames, registers: [registry] };
  // Labelled by data (`by`): a series appears with its first sample, as vLLM's does.
  const materialize = spec.by === undefined;
  switch (spec.type) {
    case 'histogram': {
      const h = new Histogram({ ...common, ...(spec.buckets ? { buckets: spec.buckets } : {}) });
      if (materialize) h.zero(labels);
      return (values, at) => {
        for (const v of values) h.observe(at, v);
      };
    }
    case 'counter': {
      const c = new Counter(common);
      if (materialize) c.inc(labels, 0);
      return (values, at) => {
        const sum = values.reduce((a, v) => a + Math.max(0, v), 0);
        c.inc(at, sum);
      };
    }
    case 'gauge': {
      const g = new Gauge(common);
      return (values, at) => {
        const last = values.at(-1);
        if (last !== undefined) g.set(at, last);
      };
    }
  }
}
