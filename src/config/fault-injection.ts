/**
 * Injected faults (docs/serve.md#injected-failures-and-steerable-state): llm-d-inference-sim's
 * request failures (`--failure-injection-rate`, `--failure-types`) and kvconnect's KV-load
 * faults for P/D tests (`--kv-load-failure-rate`, `--kv-load-stall-rate`,
 * `--kv-load-stall-duration`). Rates are percentages (0–100) as in the sim; off by default.
 */
import { configError } from './config-error.ts';
import { durationOption } from './go-duration.ts';

/** llm-d-inference-sim's failure types, in its order. */
export const FAILURE_TYPES = [
  'rate_limit',
  'invalid_api_key',
  'context_length',
  'server_error',
  'invalid_request',
  'model_not_found',
] as const;
export type FailureType = (typeof FAILURE_TYPES)[number];

export interface FailureInjectionConfig {
  /** Percentage (0–100) of generation requests answered with an injected failure. */
  rate: number;
  /** The types drawn from (uniformly); empty = all of them, as in the sim. */
  types: FailureType[];
}

export interface KvLoadFaultConfig {
  /** Percentage (0–100) of remote KV loads reported failed (every block invalid). */
  failureRate: number;
  /** Percentage (0–100) of remote KV loads held back for `stallNs` before they complete. */
  stallRate: number;
  /** How long a stalled load is held, in nanoseconds. */
  stallNs: number;
}

export const NO_FAILURES: FailureInjectionConfig = { rate: 0, types: [] };
export const NO_KV_LOAD_FAULTS: KvLoadFaultConfig = { failureRate: 0, stallRate: 0, stallNs: 0 };

/** A whole percentage 0..100, written as a number or a decimal string. */
export function percentOption(field: string, raw: unknown): number {
  const n =
    typeof raw === 'number'
      ? raw
      : typeof raw === 'string' && /^\s*\d+\s*$/.test(raw)
        ? Number(raw)
        : Number.NaN;
  if (!Number.isInteger(n) || n < 0 || n > 100) {
    throw configError(
      field,
      'a whole percentage between 0 and 100',
      raw,
      `Pass --${field} 10 for 10% of requests (0 turns it off).`,
    );
  }
  return n;
}

/** `--failure-types`: a list (repeated or space-separated values, or one comma-separated string). */
export function failureTypesOption(raw: unknown): FailureType[] {
  if (raw === undefined || raw === null) return [];
  const items = (Array.isArray(raw) ? raw : [raw]).flatMap((v) =>
    typeof v === 'string' ? v.split(',').map((s) => s.trim()) : [v],
  );
  const out: FailureType[] = [];
  for (const item of items) {
    if (item === '') continue;
    if (typeof item !== 'string' || !(FAILURE_TYPES as readonly string[]).includes(item)) {
      throw configError(
        'failure-types',
        `failure types from ${FAILURE_TYPES.join(', ')}`,
        item,
        `Pass --failure-types ${FAILURE_TYPES.slice(0, 2).join(' ')} (any of: ${FAILURE_TYPES.join(', ')}).`,
      );
    }
    if (!out.includes(item as FailureType)) out.push(item as FailureType);
  }
  return out;
}

/** The request-failure options (kebab-case keys as on the command line and in the sim's YAML). */
export function buildFailureInjection(values: Record<string, unknown>): FailureInjectionConfig {
  return {
    rate:
      values['failure-injection-rate'] === undefined
        ? 0
        : percentOption('failure-injection-rate', values['failure-injection-rate']),
    types: failureTypesOption(values['failure-types']),
  };
}

export function buildKvLoadFaults(values: Record<string, unknown>): KvLoadFaultConfig {
  const pct = (key: string): number => (values[key] === undefined ? 0 : percentOption(key, values[key]));
  const failureRate = pct('kv-load-failure-rate');
  const stallRate = pct('kv-load-stall-rate');
  const raw = values['kv-load-stall-duration'];
  const stallNs = raw === undefined ? 0 : durationOption('kv-load-stall-duration', raw);
  if (stallNs < 0) {
    throw configError('kv-load-stall-duration', 'a duration >= 0', raw, 'Pass --kv-load-stall-duration 2s.');
  }
  if (stallRate > 0 && stallNs === 0) {
    throw configError(
      'kv-load-stall-duration',
      'a positive duration when --kv-load-stall-rate is set',
      raw ?? '(unset)',
      'Add --kv-load-stall-duration 2s (how long each stalled load is held).',
    );
  }
  if (failureRate + stallRate > 100) {
    throw configError(
      'kv-load-stall-rate',
      `at most ${100 - failureRate} with --kv-load-failure-rate ${failureRate} (a load fails or stalls, not both)`,
      stallRate,
      'Lower --kv-load-failure-rate or --kv-load-stall-rate so that they add up to 100 at most.',
    );
  }
  return { failureRate, stallRate, stallNs };
}
