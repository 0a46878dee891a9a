/** Options of `kvconnect bench serve`, with the defaults the CLI shows. */

export interface BenchServeOptions {
  baseUrl: string;
  endpoint: string;
  model: string;
  /** Requests per second with Poisson arrivals; Infinity sends all at once (bounded by maxConcurrency). */
  requestRate: number;
  maxConcurrency: number | undefined;
  numPrompts: number;
  randomInputLen: number;
  randomOutputLen: number;
  randomRangeRatio: number;
  seed: number;
  trace: string | undefined;
  traceBlockTokens: number;
  traceTimeScale: number;
  maxRequests: number | undefined;
  traceMaxOutputLen: number | undefined;
  ignoreEos: boolean;
  /** Per-request deadline. */
  timeoutMs: number;
  /** No request starts after this many seconds. */
  maxDurationS: number;
  apiKey: string | undefined;
  resultJson: string | undefined;
  svg: string | undefined;
}

export const BENCH_SERVE_DEFAULTS: Omit<BenchServeOptions, 'model'> = {
  baseUrl: 'http://127.0.0.1:8000',
  endpoint: '/v1/completions',
  requestRate: Number.POSITIVE_INFINITY,
  maxConcurrency: undefined,
  numPrompts: 100,
  randomInputLen: 128,
  randomOutputLen: 32,
  randomRangeRatio: 0,
  seed: 0,
  trace: undefined,
  traceBlockTokens: 512,
  traceTimeScale: 1,
  maxRequests: undefined,
  traceMaxOutputLen: undefined,
  ignoreEos: false,
  timeoutMs: 120_000,
  maxDurationS: 3_600,
  apiKey: undefined,
  resultJson: undefined,
  svg: undefined,
};

export function resolveBenchOptions(
  partial: Partial<BenchServeOptions> & { model: string },
): BenchServeOptions {
  return { ...BENCH_SERVE_DEFAULTS, ...partial };
}
