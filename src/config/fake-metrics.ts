/**
 * `--fake-metrics`: llm-d-inference-sim's fake-metrics JSON (its field names and value forms),
 * parsed and validated here; src/server/fake-metrics.ts serves it under vLLM's family names.
 * A gauge is a fixed number or a function of time written `name:start:end:period`
 * (`oscillate`, `ramp`, `rampreset`, `squarewave`); a histogram is a list of per-bucket counts
 * (trailing buckets 0); counters are initial totals. Partial updates (POST /admin/config)
 * follow the sim: an absent or null field keeps its value, `[]` / `{}` clear a list or map.
 */
import { configError, didYouMean } from './config-error.ts';
import { formatDuration, parseGoDuration } from './go-duration.ts';

export const FAKE_FUNCTIONS = ['oscillate', 'ramp', 'rampreset', 'squarewave'] as const;
export type FakeFunctionName = (typeof FAKE_FUNCTIONS)[number];

export type FakeValue =
  | { kind: 'fixed'; value: number }
  | { kind: 'function'; name: FakeFunctionName; start: number; end: number; periodNs: number };

/** One row of vllm:lora_requests_info: comma-separated adapter names and the row's timestamp (s). */
export interface FakeLoraRow {
  running: string;
  waiting: string;
  timestamp: number;
}

export const FAKE_GAUGE_KEYS = ['running-requests', 'waiting-requests', 'kv-cache-usage'] as const;
export type FakeGaugeKey = (typeof FAKE_GAUGE_KEYS)[number];

/** Per-bucket count lists, under the sim's keys. */
export const FAKE_BUCKET_KEYS = [
  'ttft-buckets-values',
  'tpot-buckets-values',
  'e2erl-buckets-values',
  'queue-time-buckets-values',
  'inf-time-buckets-values',
  'prefill-time-buckets-values',
  'decode-time-buckets-values',
  'request-tpot-buckets-values',
  'request-prompt-tokens',
  'request-generation-tokens',
  'request-params-max-tokens',
  'request-max-generation-tokens',
] as const;
export type FakeBucketKey = (typeof FAKE_BUCKET_KEYS)[number];

export const FAKE_TOTAL_KEYS = [
  'total-prompt-tokens',
  'total-generation-tokens',
  'prefix-cache-hits',
  'prefix-cache-queries',
] as const;
export type FakeTotalKey = (typeof FAKE_TOTAL_KEYS)[number];

export interface FakeMetricsSpec {
  gauges: Partial<Record<FakeGaugeKey, FakeValue>>;
  loras: FakeLoraRow[] | null;
  buckets: Partial<Record<FakeBucketKey, number[]>>;
  /** vllm:request_success_total by finished_reason. */
  requestSuccessTotal: Record<string, number> | null;
  totals: Partial<Record<FakeTotalKey, number>>;
}

const ALL_KEYS: readonly string[] = [
  ...FAKE_GAUGE_KEYS,
  'loras',
  ...FAKE_BUCKET_KEYS,
  'request-success-total',
  ...FAKE_TOTAL_KEYS,
];

export function emptyFakeMetrics(): FakeMetricsSpec {
  return { gauges: {}, loras: null, buckets: {}, requestSuccessTotal: null, totals: {} };
}

/** `--fake-metrics` as given on the command line (a JSON string) or in YAML / a POST body (an object). */
export function parseFakeMetrics(raw: unknown, field = 'fake-metrics'): FakeMetricsSpec {
  return mergeFakeMetrics(emptyFakeMetrics(), raw, field);
}

/** `base` with the fields of `update` applied (a partial update); throws on any invalid field. */
export function mergeFakeMetrics(
  base: FakeMetricsSpec,
  raw: unknown,
  field = 'fake-metrics',
): FakeMetricsSpec {
  let update = raw;
  if (typeof raw === 'string') {
    try {
      update = JSON.parse(raw);
    } catch (e) {
      throw configError(
        field,
        'a JSON object of fake metrics',
        raw,
        `Fix the JSON (${(e as Error).message}), e.g. '{"running-requests": 3, "kv-cache-usage": "oscillate:0:1:10s"}'.`,
      );
    }
  }
  if (typeof update !== 'object' || update === null || Array.isArray(update)) {
    throw configError(
      field,
      'a JSON object of fake metrics',
      raw,
      `Pass ${field} as {"running-requests": 3, ...}.`,
    );
  }
  const out: FakeMetricsSpec = {
    gauges: { ...base.gauges },
    loras: base.loras,
    buckets: { ...base.buckets },
    requestSuccessTotal: base.requestSuccessTotal,
    totals: { ...base.totals },
  };
  for (const [key, value] of Object.entries(update as Record<string, unknown>)) {
    const name = `${field}.${key}`;
    if (!ALL_KEYS.includes(key)) {
      const guess = didYouMean(key, ALL_KEYS);
      throw configError(
        name,
        `one of ${ALL_KEYS.join(', ')}`,
        key,
        guess ? `${guess[0]?.toUpperCase()}${guess.slice(1)}` : `Remove ${key}.`,
        'KV_CONFIG_UNKNOWN_KEY',
      );
    }
    if (value === null || value === undefined) continue;
    if ((FAKE_GAUGE_KEYS as readonly string[]).includes(key)) {
      out.gauges[key as FakeGaugeKey] = fakeValue(name, value, key === 'kv-cache-usage' ? 1 : null);
    } else if (key === 'loras') {
      out.loras = loraRows(name, value);
    } else if ((FAKE_BUCKET_KEYS as readonly string[]).includes(key)) {
      const counts = countList(name, value);
      if (counts.length === 0) delete out.buckets[key as FakeBucketKey];
      else out.buckets[key as FakeBucketKey] = counts;
    } else if (key === 'request-success-total') {
      const map = reasonCounts(name, value);
      out.requestSuccessTotal = Object.keys(map).length === 0 ? null : map;
    } else {
      out.totals[key as FakeTotalKey] = count(name, value);
    }
  }
  return out;
}

/** The spec in the sim's JSON form (GET /admin/config). */
export function fakeMetricsJson(spec: FakeMetricsSpec): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(spec.gauges)) out[k] = formatFakeValue(v);
  if (spec.loras) out.loras = spec.loras;
  for (const [k, v] of Object.entries(spec.buckets)) out[k] = v;
  if (spec.requestSuccessTotal) out['request-success-total'] = spec.requestSuccessTotal;
  for (const [k, v] of Object.entries(spec.totals)) out[k] = v;
  return out;
}

export function formatFakeValue(v: FakeValue): number | string {
  if (v.kind === 'fixed') return v.value;
  return `${v.name}:${v.start}:${v.end}:${formatDuration(v.periodNs)}`;
}

/** The value of a fake gauge `elapsedNs` after its function started (the sim's shapes). */
export function fakeValueAt(v: FakeValue, elapsedNs: number): number {
  if (v.kind === 'fixed') return v.value;
  const { start, end, periodNs } = v;
  switch (v.name) {
    case 'oscillate':
      return (start + end) / 2 + ((end - start) / 2) * Math.sin((2 * Math.PI * elapsedNs) / periodNs);
    case 'ramp':
      return elapsedNs >= periodNs ? end : start + (elapsedNs / periodNs) * (end - start);
    case 'rampreset':
      return start + ((elapsedNs % periodNs) / periodNs) * (end - start);
    case 'squarewave':
      return elapsedNs % periodNs < periodNs / 2 ? start : end;
  }
}

function fakeValue(field: string, raw: unknown, max: number | null): FakeValue {
  const range = max === null ? '>= 0' : `between 0 and ${max}`;
  const hint = `Write ${field.split('.').pop()} as a number ${range} or "oscillate:0:${max ?? 10}:5s" (functions: ${FAKE_FUNCTIONS.join(', ')}).`;
  const inRange = (n: number): boolean => Number.isFinite(n) && n >= 0 && (max === null || n <= max);
  if (typeof raw === 'number') {
    if (!inRange(raw)) throw configError(field, `a number ${range}`, raw, hint);
    return { kind: 'fixed', value: raw };
  }
  if (typeof raw === 'string') {
    const trimmed = raw.trim();
    if (trimmed !== '' && Number.isFinite(Number(trimmed))) return fakeValue(field, Number(trimmed), max);
    const parts = trimmed.split(':');
    const [name, s, e, p] = parts;
    const start = Number(s);
    const end = Number(e);
    const periodNs = p === undefined ? null : parseGoDuration(p);
    if (parts.length !== 4 || !(FAKE_FUNCTIONS as readonly string[]).includes(name as string)) {
      throw configError(
        field,
        `a number or "function:start:end:period" with function one of ${FAKE_FUNCTIONS.join(', ')}`,
        raw,
        hint,
      );
    }
    if (!inRange(start) || !inRange(end) || s?.trim() === '' || e?.trim() === '') {
      throw configError(field, `start and end ${range}`, raw, hint);
    }
    if (periodNs === null || periodNs <= 0) {
      throw configError(field, 'a positive period with a unit (e.g. 5s, 500ms)', raw, hint);
    }
    return { kind: 'function', name: name as FakeFunctionName, start, end, periodNs };
  }
  throw configError(field, `a number ${range} or a function string`, raw, hint);
}

function count(field: string, raw: unknown): number {
  if (typeof raw !== 'number' || !Number.isSafeInteger(raw) || raw < 0) {
    throw configError(
      field,
      'a whole number >= 0',
      raw,
      `Write ${field.split('.').pop()} as a count, e.g. 100.`,
    );
  }
  return raw;
}

function countList(field: string, raw: unknown): number[] {
  if (!Array.isArray(raw)) {
    throw configError(
      field,
      'a list of per-bucket counts',
      raw,
      `Write ${field.split('.').pop()} as [1, 5, 0, 2].`,
    );
  }
  return raw.map((v, i) => count(`${field}[${i}]`, v));
}

function reasonCounts(field: string, raw: unknown): Record<string, number> {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw configError(
      field,
      'an object of finish reason → count',
      raw,
      'Write it as {"stop": 10, "length": 2}.',
    );
  }
  const out: Record<string, number> = {};
  for (const [reason, n] of Object.entries(raw)) out[reason] = count(`${field}.${reason}`, n);
  return out;
}

function loraRows(field: string, raw: unknown): FakeLoraRow[] {
  if (!Array.isArray(raw)) {
    throw configError(
      field,
      'a list of {running, waiting, timestamp}',
      raw,
      'Write loras as [{"running": "a,b", "waiting": "", "timestamp": 1700000000}].',
    );
  }
  return raw.map((given, i) => {
    const at = `${field}[${i}]`;
    // The sim's YAML writes each row as a JSON string.
    const row = typeof given === 'string' ? parseRow(at, given) : given;
    const r = row as Record<string, unknown>;
    if (typeof row !== 'object' || row === null || Array.isArray(row)) {
      throw configError(
        at,
        'an object {running, waiting, timestamp}',
        row,
        'Write {"running": "a,b", "waiting": "", "timestamp": 1700000000}.',
      );
    }
    for (const k of Object.keys(r)) {
      if (!['running', 'waiting', 'timestamp'].includes(k)) {
        throw configError(`${at}.${k}`, 'one of running, waiting, timestamp', k, `Remove ${k}.`);
      }
    }
    const text = (k: 'running' | 'waiting'): string => {
      const v = r[k] ?? '';
      if (typeof v !== 'string')
        throw configError(`${at}.${k}`, 'a comma-separated string of adapter names', v, 'Write "a,b" or "".');
      return v;
    };
    const ts = r.timestamp ?? 0;
    if (typeof ts !== 'number' || !Number.isFinite(ts) || ts < 0) {
      throw configError(
        `${at}.timestamp`,
        'seconds since the epoch (a number >= 0)',
        ts,
        'Write "timestamp": 1700000000.',
      );
    }
    return { running: text('running'), waiting: text('waiting'), timestamp: ts };
  });
}

function parseRow(field: string, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw configError(
      field,
      'a JSON object {running, waiting, timestamp}',
      text,
      'Write \'{"running": "a", "waiting": "", "timestamp": 1700000000}\'.',
    );
  }
}
