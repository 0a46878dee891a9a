/**
 * What a test or router harness can steer on a running server (docs/serve.md#injected-failures-and-steerable-state):
 * injected request failures, fake metrics and, through GET/POST /admin/config (dev mode
 * only), the latency model and KV-load faults too. Everything is off unless configured, and
 * loudly logged when on.
 */
import type { FakeMetricsSpec } from '../config/fake-metrics.ts';
import { type FailureInjectionConfig, NO_FAILURES } from '../config/fault-injection.ts';
import { formatDuration } from '../config/go-duration.ts';
import type { AsyncEngineLike } from '../engine/api.ts';
import { getLogger } from '../logging/logger.ts';
import { AdminConfig } from './admin-config.ts';
import { FailureInjector } from './failure-injection.ts';
import { FakeMetrics, type FakeMetricsOptions } from './fake-metrics.ts';

const log = getLogger('kvconnect.server.steering');

/** The sim's default --fake-metrics-refresh-interval. */
export const DEFAULT_FAKE_METRICS_REFRESH_MS = 100;

/** The server options that steer it (ServerOptions extends these). */
export interface SteeringOptions {
  /** --failure-injection-rate / --failure-types (default: off). */
  failureInjection?: FailureInjectionConfig;
  /** --fake-metrics: served on /metrics instead of the engine's (default: none). */
  fakeMetrics?: FakeMetricsSpec | null;
  /** --fake-metrics-refresh-interval, in ms (default 100, the sim's). */
  fakeMetricsRefreshMs?: number;
  /** --startup-duration, in ns: GET /health/ready answers 503 until it has passed. */
  startupDurationNs?: number;
  /** vLLM's --max-loras, the max_lora label of vllm:lora_requests_info (default 1, vLLM's). */
  maxLoras?: number;
}

export interface Steering {
  /** Throws the injected failure this request gets, if any. */
  injectFailure(): void;
  /** The fake metrics being served instead of the engine's, or null. */
  readonly fakeMetrics: FakeMetrics | null;
  admin(): AdminConfig;
}

export function createSteering(
  engine: AsyncEngineLike,
  options: SteeringOptions,
  info: Omit<FakeMetricsOptions, 'maxLora' | 'refreshMs'>,
): Steering {
  const failures = options.failureInjection ?? NO_FAILURES;
  const injector = new FailureInjector(
    failures,
    { servedModelName: info.modelName, maxModelLen: info.maxModelLen },
    engine.config.model.seed,
  );
  if (failures.rate > 0) {
    log.warn(
      'FAILURE INJECTION IS ON: %d%% of generation requests are answered with an injected error (%s)',
      failures.rate,
      failures.types.length > 0 ? failures.types.join(', ') : 'all types',
    );
  }
  const kv = engine.config.kvLoadFaults;
  if (kv && (kv.failureRate > 0 || kv.stallRate > 0)) {
    log.warn(
      'KV-LOAD FAULT INJECTION IS ON: %d%% of remote KV loads fail, %d%% stall for %s',
      kv.failureRate,
      kv.stallRate,
      formatDuration(kv.stallNs),
    );
  }
  const fakeOptions: FakeMetricsOptions = {
    ...info,
    maxLora: options.maxLoras ?? 1,
    refreshMs: options.fakeMetricsRefreshMs ?? DEFAULT_FAKE_METRICS_REFRESH_MS,
  };
  let fake: FakeMetrics | null = options.fakeMetrics
    ? new FakeMetrics(options.fakeMetrics, fakeOptions)
    : null;
  if (fake) log.warn("FAKE METRICS ARE ON: /metrics reports the --fake-metrics values, not the engine's");
  let admin: AdminConfig | null = null;
  return {
    injectFailure() {
      const failure = injector.draw();
      if (failure) throw failure;
    },
    get fakeMetrics() {
      return fake;
    },
    admin() {
      admin ??= new AdminConfig({
        engine,
        injector,
        fakeMetrics: () => fake,
        createFakeMetrics: (spec) => new FakeMetrics(spec, fakeOptions),
        serveFakeMetrics: (f) => {
          fake = f;
        },
        startupDurationNs: options.startupDurationNs ?? 0,
        fakeMetricsRefreshMs: fakeOptions.refreshMs,
      });
      return admin;
    },
  };
}
