/**
 * GET / POST /admin/config (llm-d-inference-sim's endpoint; kvconnect serves it only with
 * VLLM_SERVER_DEV_MODE=1, like vLLM's other development endpoints). POST takes a partial
 * update with the sim's kebab-case keys — failure injection, the latency model, fake metrics —
 * plus kvconnect's KV-load faults. The whole resulting configuration is validated before
 * anything changes: a bad body is a 400 naming the field and leaves everything as it was;
 * a good one takes effect for the next request, step and scrape.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { configError, didYouMean } from '../config/config-error.ts';
import { buildEmulationConfig, type EmulationConfig, SIM_DURATION_KEYS } from '../config/emulation-config.ts';
import {
  emptyFakeMetrics,
  type FakeMetricsSpec,
  fakeMetricsJson,
  mergeFakeMetrics,
} from '../config/fake-metrics.ts';
import {
  buildFailureInjection,
  buildKvLoadFaults,
  type FailureInjectionConfig,
  type KvLoadFaultConfig,
  NO_KV_LOAD_FAULTS,
} from '../config/fault-injection.ts';
import { formatDuration } from '../config/go-duration.ts';
import type { AsyncEngineLike } from '../engine/api.ts';
import { KVError } from '../errors/kv-error.ts';
import { type BodyRules, readJson, sendJson } from '../http/index.ts';
import { getLogger } from '../logging/logger.ts';
import type { FailureInjector } from './failure-injection.ts';
import type { FakeMetrics } from './fake-metrics.ts';

const log = getLogger('kvconnect.server.admin-config');

const FAILURE_KEYS = ['failure-injection-rate', 'failure-types'] as const;
const KV_FAULT_KEYS = ['kv-load-failure-rate', 'kv-load-stall-rate', 'kv-load-stall-duration'] as const;
const LATENCY_KEYS = [...Object.keys(SIM_DURATION_KEYS), 'time-factor-under-load', 'latency-calculator'];
const ROOFLINE_KEYS = ['target-model', 'target-accelerator', 'target-tp'] as const;
/** Every key POST accepts. */
export const ADMIN_CONFIGURABLE: readonly string[] = [
  ...FAILURE_KEYS,
  ...KV_FAULT_KEYS,
  ...LATENCY_KEYS,
  'fake-metrics',
];

export interface AdminConfigDeps {
  engine: AsyncEngineLike;
  injector: FailureInjector;
  /** The fake metrics being served, or null. */
  fakeMetrics: () => FakeMetrics | null;
  /** Builds fake metrics for a spec (its validation: throws a config error naming the field). */
  createFakeMetrics: (spec: FakeMetricsSpec) => FakeMetrics;
  /** Serves these fake metrics on /metrics from now on. */
  serveFakeMetrics: (fake: FakeMetrics) => void;
  /** Read-only facts shown by GET. */
  startupDurationNs: number;
  fakeMetricsRefreshMs: number;
}

export class AdminConfig {
  readonly #deps: AdminConfigDeps;
  #emulation: EmulationConfig | null;
  #kvFaults: KvLoadFaultConfig;

  constructor(deps: AdminConfigDeps) {
    this.#deps = deps;
    this.#emulation = deps.engine.config.emulation ?? null;
    this.#kvFaults = deps.engine.config.kvLoadFaults ?? NO_KV_LOAD_FAULTS;
  }

  /** The configuration as GET shows it (the sim's keys and value forms). */
  current(): Record<string, unknown> {
    const f = this.#deps.injector.config;
    const out: Record<string, unknown> = {
      'failure-injection-rate': f.rate,
      'failure-types': f.types,
      'kv-load-failure-rate': this.#kvFaults.failureRate,
      'kv-load-stall-rate': this.#kvFaults.stallRate,
      'kv-load-stall-duration': formatDuration(this.#kvFaults.stallNs),
      ...this.#latencyValues(),
    };
    out['latency-calculator'] = this.#emulation?.latencyCalculator ?? null;
    const fake = this.#deps.fakeMetrics();
    out['fake-metrics'] = fake ? fakeMetricsJson(fake.spec) : null;
    out['fake-metrics-refresh-interval'] = formatDuration(this.#deps.fakeMetricsRefreshMs * 1e6);
    out['startup-duration'] = formatDuration(this.#deps.startupDurationNs);
    return out;
  }

  /** Applies a partial update atomically; throws (changing nothing) on the first bad field. */
  apply(body: unknown): Record<string, unknown> {
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      throw configError(
        'body',
        'a JSON object of admin-configurable fields',
        body,
        'POST e.g. {"failure-injection-rate": 10, "failure-types": ["rate_limit"]}.',
      );
    }
    const update = body as Record<string, unknown>;
    for (const key of Object.keys(update)) {
      if (!ADMIN_CONFIGURABLE.includes(key)) {
        const guess = didYouMean(key, ADMIN_CONFIGURABLE);
        throw new KVError('KV_CONFIG_UNKNOWN_KEY', `field '${key}' is not admin-configurable`, {
          field: key,
          hint: `${guess ? `${guess[0]?.toUpperCase()}${guess.slice(1)} ` : ''}Configurable: ${ADMIN_CONFIGURABLE.join(', ')}.`,
        });
      }
    }
    const has = (keys: readonly string[]): boolean => keys.some((k) => update[k] !== undefined);
    const pick = (keys: readonly string[]): Record<string, unknown> =>
      Object.fromEntries(keys.filter((k) => update[k] !== undefined).map((k) => [k, update[k]]));

    // 1. Validate everything into the next state; nothing is applied yet.
    const now = this.current();
    const failures: FailureInjectionConfig | null = has(FAILURE_KEYS)
      ? buildFailureInjection({ ...subset(now, FAILURE_KEYS), ...pick(FAILURE_KEYS) })
      : null;
    const kvFaults = has(KV_FAULT_KEYS)
      ? buildKvLoadFaults({ ...subset(now, KV_FAULT_KEYS), ...durationsAsText(pick(KV_FAULT_KEYS)) })
      : null;
    const emulation = has(LATENCY_KEYS) ? this.#nextEmulation(durationsAsText(pick(LATENCY_KEYS))) : null;
    if (emulation && !this.#deps.engine.setEmulation) {
      throw new KVError(
        'SERVER_NOT_IMPLEMENTED',
        'This engine cannot change its latency model at run time.',
        {
          hint: 'Serve an AsyncEngine (kvconnect serve does).',
        },
      );
    }
    if (kvFaults && !this.#deps.engine.setKvLoadFaults) {
      throw new KVError(
        'SERVER_NOT_IMPLEMENTED',
        'This engine cannot change its KV-load faults at run time.',
        {
          hint: 'Serve an AsyncEngine (kvconnect serve does).',
        },
      );
    }
    // Fake metrics last: building them is their validation, and the only step with effects.
    let commitFake: (() => void) | null = null;
    if (update['fake-metrics'] !== undefined && update['fake-metrics'] !== null) {
      const fake = this.#deps.fakeMetrics();
      const spec = mergeFakeMetrics(fake?.spec ?? emptyFakeMetrics(), update['fake-metrics']);
      if (fake) {
        commitFake = fake.prepare(spec);
      } else {
        const created = this.#deps.createFakeMetrics(spec);
        commitFake = () => {
          this.#deps.serveFakeMetrics(created);
          log.info("Fake metrics are now served on /metrics instead of the engine's");
        };
      }
    }

    // 2. Apply.
    if (failures) {
      this.#deps.injector.config = failures;
      const level = failures.rate > 0 ? 'warn' : 'info';
      log[level](
        'Failure injection set to %d%% (%s)',
        failures.rate,
        failures.types.length ? failures.types.join(', ') : 'all types',
      );
    }
    if (kvFaults) {
      this.#deps.engine.setKvLoadFaults?.(kvFaults);
      this.#kvFaults = kvFaults;
      log.warn(
        'KV-load faults set: %d%% fail, %d%% stall for %s',
        kvFaults.failureRate,
        kvFaults.stallRate,
        formatDuration(kvFaults.stallNs),
      );
    }
    if (emulation) {
      this.#deps.engine.setEmulation?.(emulation);
      this.#emulation = emulation;
      log.info('Latency model set: %s', JSON.stringify(this.#latencyValues()));
    }
    commitFake?.();
    return this.current();
  }

  async handleGet(_req: IncomingMessage, res: ServerResponse): Promise<void> {
    sendJson(res, 200, this.current());
  }

  async handlePost(rules: BodyRules, req: IncomingMessage, res: ServerResponse): Promise<void> {
    sendJson(res, 200, this.apply(await readJson(req, rules)));
  }

  /** The latency options as values buildEmulationConfig reads (kebab-case, durations as text). */
  #latencyValues(): Record<string, unknown> {
    const sim = this.#emulation?.sim;
    const out: Record<string, unknown> = {};
    for (const [key, field] of Object.entries(SIM_DURATION_KEYS))
      out[key] = formatDuration(sim?.[field] ?? 0);
    out['time-factor-under-load'] = sim?.timeFactorUnderLoad ?? 1;
    return out;
  }

  #nextEmulation(update: Record<string, unknown>): EmulationConfig {
    const current = this.#emulation;
    const values: Record<string, unknown> = { ...this.#latencyValues() };
    if (current?.latencyCalculator !== null && current?.latencyCalculator !== undefined) {
      values['latency-calculator'] = current.latencyCalculator;
    }
    if (current?.roofline) {
      values['target-model'] = current.roofline.model;
      values['target-accelerator'] = current.roofline.accelerator;
      values['target-tp'] = current.roofline.tensorParallelSize;
    }
    Object.assign(values, update);
    if (values['latency-calculator'] !== 'roofline') for (const k of ROOFLINE_KEYS) delete values[k];
    const seed = current?.seed ?? this.#deps.engine.config.model.seed;
    const built = buildEmulationConfig(values, seed);
    if (!built) throw new Error('unreachable: latency values are always given');
    return {
      latencyCalculator: built.latencyCalculator,
      sim: built.sim,
      roofline: built.roofline,
      targetKv: current?.targetKv ?? null,
      kvLink: current?.kvLink ?? null,
      mode: current?.mode ?? 'model',
      speedup: current?.speedup ?? 1,
      seed,
    };
  }
}

function subset(values: Record<string, unknown>, keys: readonly string[]): Record<string, unknown> {
  return Object.fromEntries(keys.map((k) => [k, values[k]]));
}

/** The sim's admin endpoint takes a duration as Go text or as integer nanoseconds. */
function durationsAsText(values: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(values)) {
    const isDuration = k in SIM_DURATION_KEYS || k === 'kv-load-stall-duration';
    out[k] = isDuration && typeof v === 'number' && Number.isInteger(v) && v > 0 ? `${v}ns` : v;
  }
  return out;
}
