/**
 * Emulated deployments (docs/emulation.md): the step-time model, where tokens come from and
 * how fast emulated time runs. The latency options are llm-d-inference-sim's, with its names
 * (kebab-case, the same on the command line and in `--config FILE.yaml`), its duration syntax
 * and its validation rules; `roofline` and the `target-*` options are kvconnect's own.
 */
import { configError } from './config-error.ts';
import { durationOption, formatDuration } from './go-duration.ts';
import { KV_LINKS, type KvLink } from './target-deployment.ts';

/** `""` is the sim's legacy calculator (constant form when a TTFT is set, per-token otherwise). */
export const LATENCY_CALCULATORS = ['', 'constant', 'per-token', 'roofline'] as const;
export type LatencyCalculatorName = (typeof LATENCY_CALCULATORS)[number];

/** Where tokens come from: the real model, or a generator without weights (the sim's modes). */
export const TOKEN_MODES = ['model', 'random', 'echo'] as const;
export type TokenMode = (typeof TOKEN_MODES)[number];

/** The sim's latency parameters, in nanoseconds (Go's time.Duration), and its load factor. */
export interface SimLatency {
  timeToFirstToken: number;
  timeToFirstTokenStdDev: number;
  interTokenLatency: number;
  interTokenLatencyStdDev: number;
  prefillOverhead: number;
  prefillTimePerToken: number;
  prefillTimeStdDev: number;
  kvCacheTransferLatency: number;
  kvCacheTransferLatencyStdDev: number;
  kvCacheTransferTimePerToken: number;
  kvCacheTransferTimeStdDev: number;
  timeFactorUnderLoad: number;
}

/** The deployment the roofline calculator models. */
export interface RooflineTarget {
  /** A built-in model shape name, or a directory / config.json path. */
  model: string;
  accelerator: string;
  tensorParallelSize: number;
}

/** KV at the target model's size (model-free modes only): its geometry, bytes divided by `bytesScale`. */
export interface TargetKv {
  model: string;
  bytesScale: number;
}

export interface EmulationConfig {
  /** null: no step-time model, steps take what the computation takes. */
  latencyCalculator: LatencyCalculatorName | null;
  sim: SimLatency;
  roofline: RooflineTarget | null;
  targetKv: TargetKv | null;
  /** The link KV transfers are held to (P/D), or null: real transfer time only. */
  kvLink: KvLink | null;
  mode: TokenMode;
  /** Emulated time runs this many times faster than the wall clock. */
  speedup: number;
  /** Seed of the latency jitter (the engine's --seed). */
  seed: number;
}

/** Option name (flag and YAML key) → SimLatency field, for the eleven durations. */
export const SIM_DURATION_KEYS = {
  'time-to-first-token': 'timeToFirstToken',
  'time-to-first-token-std-dev': 'timeToFirstTokenStdDev',
  'inter-token-latency': 'interTokenLatency',
  'inter-token-latency-std-dev': 'interTokenLatencyStdDev',
  'prefill-overhead': 'prefillOverhead',
  'prefill-time-per-token': 'prefillTimePerToken',
  'prefill-time-std-dev': 'prefillTimeStdDev',
  'kv-cache-transfer-latency': 'kvCacheTransferLatency',
  'kv-cache-transfer-latency-std-dev': 'kvCacheTransferLatencyStdDev',
  'kv-cache-transfer-time-per-token': 'kvCacheTransferTimePerToken',
  'kv-cache-transfer-time-std-dev': 'kvCacheTransferTimeStdDev',
} as const satisfies Record<string, keyof SimLatency>;

export type SimDurationKey = keyof typeof SIM_DURATION_KEYS;

export interface EmulationOptionDef {
  kind: 'duration' | 'number' | 'int' | 'choice' | 'string';
  help: string;
  choices?: readonly string[];
}

/** Every emulation option; CLI flags, help and YAML keys are derived from this table. */
export const EMULATION_OPTIONS: Record<string, EmulationOptionDef> = {
  'latency-calculator': {
    kind: 'choice',
    choices: LATENCY_CALCULATORS,
    help: 'step-time model: constant | per-token (llm-d-inference-sim\'s), roofline (from the batch run and a target deployment), "" (the sim\'s legacy rule); unset and no latency option: real compute time',
  },
  'time-to-first-token': { kind: 'duration', help: 'constant calculator: time to first token, e.g. 100ms' },
  'time-to-first-token-std-dev': {
    kind: 'duration',
    help: 'jitter of time-to-first-token (at most 30% of it)',
  },
  'inter-token-latency': { kind: 'duration', help: 'time of each further token, e.g. 12ms' },
  'inter-token-latency-std-dev': {
    kind: 'duration',
    help: 'jitter of inter-token-latency (at most 30% of it)',
  },
  'prefill-overhead': { kind: 'duration', help: 'per-token calculator: fixed prefill cost, e.g. 30ms' },
  'prefill-time-per-token': {
    kind: 'duration',
    help: 'per-token calculator: cost of each uncached prompt token, e.g. 250us',
  },
  'prefill-time-std-dev': { kind: 'duration', help: 'jitter of the whole prefill time' },
  'kv-cache-transfer-latency': {
    kind: 'duration',
    help: 'constant calculator, P/D decode side: KV transfer time instead of the prefill, e.g. 2ms',
  },
  'kv-cache-transfer-latency-std-dev': {
    kind: 'duration',
    help: 'jitter of kv-cache-transfer-latency (at most 30% of it)',
  },
  'kv-cache-transfer-time-per-token': {
    kind: 'duration',
    help: 'per-token calculator, P/D decode side: KV transfer time per prompt token, e.g. 3us',
  },
  'kv-cache-transfer-time-std-dev': { kind: 'duration', help: 'jitter of the whole KV transfer time' },
  'time-factor-under-load': {
    kind: 'number',
    help: 'slowdown at max-num-seqs running requests, linear from 1 at one request (>= 1; KV transfer is not scaled)',
  },
  mode: {
    kind: 'choice',
    choices: TOKEN_MODES,
    help: "where tokens come from: model (the real model), random or echo (llm-d-inference-sim's modes, no weights, no compute)",
  },
  speedup: {
    kind: 'number',
    help: 'run emulated time this many times faster than the wall clock; metrics, events and timings stay in emulated time',
  },
  'target-model': {
    kind: 'string',
    help: 'the emulated model: a built-in shape (llama-3.1-8b, llama-3.1-70b, qwen3-32b, mistral-7b) or a config.json (or its directory); its time under roofline, its KV size under --mode random|echo',
  },
  'target-accelerator': {
    kind: 'choice',
    choices: ['h100', 'h200', 'b200', 'a100', 'l40s', 'mi300x'],
    help: 'roofline: accelerator of the target deployment',
  },
  'target-tp': { kind: 'int', help: 'roofline: tensor-parallel size of the target deployment' },
  'kv-link': {
    kind: 'string',
    help: 'hold every KV transfer until this link would have finished it: nvlink, ib-ndr, roce-200, eth-100, eth-25, or GB/s,latency (e.g. 12.5,2ms)',
  },
  'kv-bytes-scale': {
    kind: 'int',
    help: "--mode random|echo with --target-model: divide the target's KV bytes by this (must divide its head_dim) to fit this machine's memory",
  },
};

export const EMULATION_OPTION_NAMES = Object.keys(EMULATION_OPTIONS);

const ZERO_LATENCY: SimLatency = {
  timeToFirstToken: 0,
  timeToFirstTokenStdDev: 0,
  interTokenLatency: 0,
  interTokenLatencyStdDev: 0,
  prefillOverhead: 0,
  prefillTimePerToken: 0,
  prefillTimeStdDev: 0,
  kvCacheTransferLatency: 0,
  kvCacheTransferLatencyStdDev: 0,
  kvCacheTransferTimePerToken: 0,
  kvCacheTransferTimeStdDev: 0,
  timeFactorUnderLoad: 1,
};

/**
 * Validates the emulation options (kebab-case keys, values as written: strings from the
 * command line, strings or numbers from YAML) and returns the config, or null when none is set.
 */
export function buildEmulationConfig(values: Record<string, unknown>, seed = 0): EmulationConfig | null {
  const given = Object.keys(values).filter((k) => values[k] !== undefined);
  if (given.length === 0) return null;
  const sim: SimLatency = { ...ZERO_LATENCY };
  for (const [key, field] of Object.entries(SIM_DURATION_KEYS)) {
    if (values[key] === undefined) continue;
    const ns = durationOption(key, values[key]);
    if (ns < 0)
      throw configError(key, 'a duration >= 0', values[key], `Pass --${key} 0 or a positive duration.`);
    sim[field] = ns;
  }
  if (values['time-factor-under-load'] !== undefined) {
    sim.timeFactorUnderLoad = numberOption('time-factor-under-load', values['time-factor-under-load'], 1);
  }
  checkStdDev(sim, 'time-to-first-token');
  checkStdDev(sim, 'inter-token-latency');
  checkStdDev(sim, 'kv-cache-transfer-latency');

  const latencyKeysSet = given.some((k) => k in SIM_DURATION_KEYS || k === 'time-factor-under-load');
  const calculator = values['latency-calculator'];
  let latencyCalculator: LatencyCalculatorName | null = null;
  if (calculator !== undefined) {
    latencyCalculator = choiceOption('latency-calculator', calculator, LATENCY_CALCULATORS);
  } else if (latencyKeysSet) {
    latencyCalculator = '';
  }
  const mode = values.mode === undefined ? 'model' : choiceOption('mode', values.mode, TOKEN_MODES);
  const roofline = rooflineTarget(values, latencyCalculator);
  const targetKv = targetKvOf(values, mode);
  const speedup = values.speedup === undefined ? 1 : numberOption('speedup', values.speedup, 0, true);
  const kvLink = values['kv-link'] === undefined ? null : parseKvLink(values['kv-link']);
  return { latencyCalculator, sim, roofline, targetKv, kvLink, mode, speedup, seed };
}

/** A named link, or `GB/s,latency` (e.g. `12.5,2ms`). */
export function parseKvLink(raw: unknown): KvLink {
  const text = typeof raw === 'string' ? raw.trim() : '';
  const named = KV_LINKS[text];
  if (named) return named;
  const [bw, latency, ...rest] = text.split(',');
  const bandwidthGBs = Number(bw);
  const latencyNs = latency === undefined ? null : durationOption('kv-link', latency.trim());
  if (rest.length > 0 || !(bandwidthGBs > 0) || latencyNs === null || latencyNs < 0) {
    throw configError(
      'kv-link',
      `a link name (${Object.keys(KV_LINKS).join(', ')}) or "GB/s,latency"`,
      raw,
      'Pass --kv-link ib-ndr, or --kv-link 12.5,2ms for 12.5 GB/s with 2 ms setup.',
    );
  }
  return { name: text, bandwidthGBs, latencyUs: latencyNs / 1e3 };
}

function targetKvOf(values: Record<string, unknown>, mode: TokenMode): TargetKv | null {
  const model = values['target-model'];
  const scale = values['kv-bytes-scale'];
  if (mode === 'model' || model === undefined) {
    if (scale !== undefined) {
      throw configError(
        'kv-bytes-scale',
        'to be used with --mode random|echo and --target-model',
        scale,
        'Add --mode random --target-model llama-3.1-8b, or drop --kv-bytes-scale.',
      );
    }
    return null;
  }
  const bytesScale = scale === undefined ? 1 : numberOption('kv-bytes-scale', scale, 1);
  if (!Number.isInteger(bytesScale)) {
    throw configError(
      'kv-bytes-scale',
      'a whole number >= 1',
      scale,
      'Pass --kv-bytes-scale 1, 2, 4, 8, 16, ...',
    );
  }
  return { model: String(model).trim(), bytesScale };
}

function rooflineTarget(
  values: Record<string, unknown>,
  calculator: LatencyCalculatorName | null,
): RooflineTarget | null {
  const keys = ['target-accelerator', 'target-tp'] as const;
  if (calculator !== 'roofline') {
    const stray = keys.find((k) => values[k] !== undefined);
    if (stray) {
      throw configError(
        stray,
        'to be used with --latency-calculator roofline',
        values[stray],
        `Add --latency-calculator roofline, or drop --${stray}.`,
      );
    }
    if (values['target-model'] !== undefined && (values.mode ?? 'model') === 'model') {
      throw configError(
        'target-model',
        'to be used with --latency-calculator roofline (time) or --mode random|echo (KV size)',
        values['target-model'],
        'Add --latency-calculator roofline, or --mode random, or drop --target-model.',
      );
    }
    return null;
  }
  const model = values['target-model'];
  if (typeof model !== 'string' || model.trim() === '') {
    throw configError(
      'target-model',
      'a model shape for --latency-calculator roofline',
      model,
      'Pass --target-model llama-3.1-8b (or llama-3.1-70b, qwen3-32b, mistral-7b, or a path to a config.json).',
    );
  }
  const accelerator =
    values['target-accelerator'] === undefined
      ? 'h100'
      : choiceOption(
          'target-accelerator',
          values['target-accelerator'],
          EMULATION_OPTIONS['target-accelerator']?.choices ?? [],
        );
  const tp = values['target-tp'] === undefined ? 1 : numberOption('target-tp', values['target-tp'], 1);
  if (!Number.isInteger(tp)) {
    throw configError(
      'target-tp',
      'a whole number >= 1',
      values['target-tp'],
      'Pass --target-tp 1, 2, 4 or 8.',
    );
  }
  return { model: model.trim(), accelerator, tensorParallelSize: tp };
}

/** The sim's rule: a std-dev may be at most 30% of its mean. */
function checkStdDev(
  sim: SimLatency,
  key: 'time-to-first-token' | 'inter-token-latency' | 'kv-cache-transfer-latency',
): void {
  const mean = sim[SIM_DURATION_KEYS[key]];
  const stdKey = `${key}-std-dev` as SimDurationKey;
  const std = sim[SIM_DURATION_KEYS[stdKey]];
  if (std > 0.3 * mean) {
    throw configError(
      stdKey,
      `at most 30% of ${key} (${formatDuration(mean)}), so at most ${formatDuration(Math.floor(0.3 * mean))}`,
      formatDuration(std),
      `Lower --${stdKey} or raise --${key} (llm-d-inference-sim's rule; sampled values are clamped to ±70% of the mean).`,
    );
  }
}

function numberOption(field: string, raw: unknown, min: number, exclusive = false): number {
  const n =
    typeof raw === 'number' ? raw : typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : Number.NaN;
  if (!Number.isFinite(n) || (exclusive ? n <= min : n < min)) {
    throw configError(
      field,
      `a number ${exclusive ? '>' : '>='} ${min}`,
      raw,
      `Pass --${field} with a number ${exclusive ? 'above' : 'of at least'} ${min}.`,
    );
  }
  return n;
}

function choiceOption<T extends string>(field: string, raw: unknown, choices: readonly T[]): T {
  if (typeof raw === 'string' && (choices as readonly string[]).includes(raw)) return raw as T;
  throw configError(
    field,
    `one of ${choices.map((c) => JSON.stringify(c)).join(', ')}`,
    raw,
    `Pass --${field} ${choices.filter((c) => c !== '').join(' | ')}.`,
  );
}

/** What a server states about its emulation (GET /kvconnect/info `emulation`), snake_case. */
export function emulationInfo(e: EmulationConfig | null | undefined): Record<string, unknown> | null {
  if (!e) return null;
  return {
    latency_calculator: e.latencyCalculator,
    mode: e.mode,
    speedup: e.speedup,
    target_model: e.targetKv?.model ?? e.roofline?.model ?? null,
    target_accelerator: e.roofline?.accelerator ?? null,
    target_tp: e.roofline?.tensorParallelSize ?? null,
    kv_bytes_scale: e.targetKv?.bytesScale ?? null,
    kv_link: e.kvLink,
  };
}
