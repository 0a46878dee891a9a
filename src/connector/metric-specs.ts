/**
 * How a connector declares its Prometheus metrics (vLLM's build_prom_metrics): each spec
 * names a metric and the key of the connector's stats data that feeds it. A connector class
 * returns its specs from the static `metricSpecs()` (docs/connector-api.md#metrics); the
 * server builds the metrics from them (src/server/connector-metrics.ts).
 *
 * Typed against the connector's own stats, `ConnectorMetricSpec<MyStats>` accepts only keys
 * of MyStats that hold samples, so a misspelt key does not compile.
 */
import type { KVConnectorStatsData } from './types.ts';

export type ConnectorMetricType = 'histogram' | 'counter' | 'gauge';

interface MetricSpecBase {
  /** The metric name as scraped; vLLM's Python client serves a Counter `vllm:x` as `vllm:x_total`. */
  name: string;
  help: string;
  /** A histogram observes every sample, a counter adds them, a gauge takes the last. */
  type: ConnectorMetricType;
  buckets?: readonly number[];
  /** Multiplier applied to every sample (e.g. 1e-3 for ms → s). */
  scale?: number;
  /**
   * The stats are nested under these keys before `key` is read (MultiConnector: the child's
   * class name, as its stats are `{childClassName: stats}`).
   */
  within?: readonly string[];
  /** Fixed labels of this spec's series, which exist (at 0) from the start. */
  labels?: Readonly<Record<string, string>>;
}

/** Members of E that are numbers. */
type NumericField<E> = { [F in keyof E & string]-?: E[F] extends number ? F : never }[keyof E & string];

/** How a stats value of type V can feed a metric. */
type SamplesOf<V, K extends string> = V extends number | readonly number[]
  ? // One sample, or one per entry.
    { key: K; field?: never; by?: never }
  : V extends readonly (infer E)[]
    ? // One sample per entry: the entry's `field`.
      { key: K; field: NumericField<E>; by?: never }
    : V extends Readonly<Record<string, infer L>>
      ? // One series per entry, labelled `by` = the entry's key.
        L extends number | readonly number[]
        ? { key: K; by: string; field?: never }
        : L extends readonly (infer E)[]
          ? { key: K; by: string; field: NumericField<E> }
          : never
      : never;

type TypedMetricSpec<S> = {
  [K in keyof S & string]-?: MetricSpecBase & SamplesOf<NonNullable<S[K]>, K>;
}[keyof S & string];

/** For stats without a declared type: any key. */
interface UntypedMetricSpec extends MetricSpecBase {
  /** Key in the stats data: a number or a list of numbers (or of objects, with `field`). */
  key: string;
  /** The key holds {label value: samples}: one series per entry, with this label. */
  by?: string;
  /** The samples are objects: use this member of each. */
  field?: string;
}

/** One metric of a connector, fed by the key `key` of its stats data `S`. */
export type ConnectorMetricSpec<S = KVConnectorStatsData> = string extends keyof S
  ? UntypedMetricSpec
  : TypedMetricSpec<S>;

/** vLLM's NIXL histogram buckets, seconds; the P/D connectors' transfer histograms share them. */
export const TRANSFER_TIME_BUCKETS: readonly number[] = [
  0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0,
];
/** 2 KiB .. 8 GiB, every other power of two (vLLM: "uniform 2kb to 16gb range"). */
export const TRANSFER_BYTES_BUCKETS: readonly number[] = Array.from(
  { length: 12 },
  (_, i) => 2 ** (11 + 2 * i),
);
