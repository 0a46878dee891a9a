/**
 * `serve`'s options for steering a server in tests (llm-d-inference-sim's names, also read
 * from its YAML by `--config`): injected failures, KV-load faults, fake metrics and the
 * startup delay of GET /health/ready. The CLI flags and help are derived from this table.
 */
import { configError } from './config-error.ts';
import { type FakeMetricsSpec, parseFakeMetrics } from './fake-metrics.ts';
import {
  buildFailureInjection,
  buildKvLoadFaults,
  FAILURE_TYPES,
  type FailureInjectionConfig,
  type KvLoadFaultConfig,
} from './fault-injection.ts';
import { durationOption } from './go-duration.ts';

export interface SteeringOptionDef {
  help: string;
  /** Takes several values (`--failure-types a b`). */
  variadic?: boolean;
}

export const STEERING_OPTIONS: Record<string, SteeringOptionDef> = {
  'failure-injection-rate': {
    help: 'percentage (0-100) of generation requests answered at once with an injected error (llm-d-inference-sim semantics; default 0 = off)',
  },
  'failure-types': {
    variadic: true,
    help: `the injected errors to draw from (default: all): ${FAILURE_TYPES.join(', ')}`,
  },
  'kv-load-failure-rate': {
    help: 'percentage (0-100) of remote KV loads reported failed, handled per kv_load_failure_policy (default 0 = off)',
  },
  'kv-load-stall-rate': {
    help: 'percentage (0-100) of remote KV loads held back for --kv-load-stall-duration before they complete (default 0 = off)',
  },
  'kv-load-stall-duration': { help: 'how long a stalled KV load is held, e.g. 2s' },
  'fake-metrics': {
    help: 'JSON of fake values /metrics reports instead of the engine\'s (llm-d-inference-sim\'s fields, e.g. \'{"running-requests":"oscillate:0:10:5s","kv-cache-usage":0.4}\')',
  },
  'fake-metrics-refresh-interval': {
    help: 'how often function-valued fake metrics are recomputed (default 100ms)',
  },
  'startup-duration': {
    help: 'GET /health/ready answers 503 for this long after start, e.g. 30s (default 0)',
  },
};

export const STEERING_OPTION_NAMES = Object.keys(STEERING_OPTIONS);

export interface SteeringConfig {
  failures: FailureInjectionConfig;
  kvLoadFaults: KvLoadFaultConfig;
  fakeMetrics: FakeMetricsSpec | null;
  fakeMetricsRefreshMs: number;
  startupDurationNs: number;
}

export function buildSteering(values: Record<string, unknown>): SteeringConfig {
  const refresh = values['fake-metrics-refresh-interval'];
  const refreshNs = refresh === undefined ? 100e6 : durationOption('fake-metrics-refresh-interval', refresh);
  if (refreshNs <= 0) {
    throw configError(
      'fake-metrics-refresh-interval',
      'a positive duration',
      refresh,
      'Pass --fake-metrics-refresh-interval 100ms.',
    );
  }
  const startup = values['startup-duration'];
  const startupDurationNs = startup === undefined ? 0 : durationOption('startup-duration', startup);
  if (startupDurationNs < 0) {
    throw configError('startup-duration', 'a duration >= 0', startup, 'Pass --startup-duration 30s.');
  }
  return {
    failures: buildFailureInjection(values),
    kvLoadFaults: buildKvLoadFaults(values),
    fakeMetrics: values['fake-metrics'] === undefined ? null : parseFakeMetrics(values['fake-metrics']),
    fakeMetricsRefreshMs: refreshNs / 1e6,
    startupDurationNs,
  };
}
