/**
 * The connector's Prometheus metrics, built from the specs its class declares
 * (KVConnectorBase.metricSpecs, vLLM's build_prom_metrics) and fed by its stats data step by
 * step. Arrays are per-event samples (a histogram observes each, a counter adds each, as
 * vLLM's observe() does); a number is one sample. With `by`, the key holds {label value:
 * samples} and each entry is its own series; `within` names the nested stats a spec reads
 * (a MultiConnector child's); `labels` are fixed labels of the spec's series. Specs that name
 * the same metric feed one metric.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { ConnectorMetricSpec } from '../connector/metric-specs.ts';
import { isRecord } from '../wire/index.ts';

type LabelValues = Record<string, string>;

/** Records samples under labels; `zero` makes a series exist at 0 before its first sample. */
interface Sink {
  record(values: readonly number[], labels: LabelValues): void;
  zero(labels: LabelValues): void;
}

interface BoundSpec {
  spec: ConnectorMetricSpec;
  sink: Sink;
  /** The engine's labels and the spec's fixed ones. */
  labels: LabelValues;
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

/** The live metrics of one connector. */
export class ConnectorMetrics {
  readonly #bound: BoundSpec[] = [];

  constructor(registry: Registry, specs: readonly ConnectorMetricSpec[], labels: LabelValues) {
    const created = new Map<string, Sink>();
    for (const spec of specs) {
      let sink = created.get(spec.name);
      if (!sink) {
        sink = makeSink(registry, spec, labels);
        created.set(spec.name, sink);
      }
      const at = { ...labels, ...spec.labels };
      // Labelled by data (`by`): a series appears with its first sample, as vLLM's does.
      if (spec.by === undefined) sink.zero(at);
      this.#bound.push({ spec, sink, labels: at });
    }
  }

  /** Records one stats payload of the connector. */
  observe(data: Record<string, unknown> | null): void {
    if (!data) return;
    for (const { spec, sink, labels } of this.#bound) {
      let scope: unknown = data;
      for (const key of spec.within ?? []) scope = isRecord(scope) ? scope[key] : undefined;
      const value = isRecord(scope) ? scope[spec.key] : undefined;
      if (value === undefined) continue;
      if (spec.by === undefined) {
        sink.record(samples(value, spec), labels);
      } else if (isRecord(value)) {
        for (const [labelValue, entries] of Object.entries(value))
          sink.record(samples(entries, spec), { ...labels, [spec.by]: labelValue });
      }
    }
  }
}

function makeSink(registry: Registry, spec: ConnectorMetricSpec, labels: LabelValues): Sink {
  const labelNames = [
    ...Object.keys(labels),
    ...Object.keys(spec.labels ?? {}),
    ...(spec.by === undefined ? [] : [spec.by]),
  ];
  const common = { name: spec.name, help: spec.help, labelNames, registers: [registry] };
  switch (spec.type) {
    case 'histogram': {
      const h = new Histogram({ ...common, ...(spec.buckets ? { buckets: [...spec.buckets] } : {}) });
      return {
        record: (values, at) => {
          for (const v of values) h.observe(at, v);
        },
        zero: (at) => h.zero(at),
      };
    }
    case 'counter': {
      const c = new Counter(common);
      return {
        record: (values, at) =>
          c.inc(
            at,
            values.reduce((a, v) => a + Math.max(0, v), 0),
          ),
        zero: (at) => c.inc(at, 0),
      };
    }
    case 'gauge': {
      const g = new Gauge(common);
      return {
        record: (values, at) => {
          const last = values.at(-1);
          if (last !== undefined) g.set(at, last);
        },
        // A gauge has no meaningful 0: its series appears with its first value.
        zero: () => {},
      };
    }
  }
}
