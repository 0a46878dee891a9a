/** Summary statistics of a run, named as `vllm bench serve` names them. */
import type { RequestResult } from './sse-client.ts';

export interface Distribution {
  mean: number;
  p50: number;
  p90: number;
  p99: number;
}

/** Linear interpolation between closest ranks (numpy's default percentile). */
export function interpolatedPercentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (rank - lo);
}

export function distribution(values: readonly number[]): Distribution {
  const sorted = [...values].sort((a, b) => a - b);
  const mean = sorted.length === 0 ? 0 : sorted.reduce((s, v) => s + v, 0) / sorted.length;
  return {
    mean,
    p50: interpolatedPercentile(sorted, 50),
    p90: interpolatedPercentile(sorted, 90),
    p99: interpolatedPercentile(sorted, 99),
  };
}

export interface BenchSummary {
  completed: number;
  failed: number;
  durationS: number;
  requestThroughput: number;
  outputThroughput: number;
  totalInputTokens: number;
  totalOutputTokens: number;
  ttftMs: Distribution;
  tpotMs: Distribution;
  itlMs: Distribution;
  e2eMs: Distribution;
}

export function summarize(results: readonly RequestResult[], durationS: number): BenchSummary {
  const ok = results.filter((r) => r.ok);
  const tpot = ok.filter((r) => r.outputTokens > 1).map((r) => (r.e2eMs - r.ttftMs) / (r.outputTokens - 1));
  const outTokens = ok.reduce((s, r) => s + r.outputTokens, 0);
  return {
    completed: ok.length,
    failed: results.length - ok.length,
    durationS,
    requestThroughput: durationS > 0 ? ok.length / durationS : 0,
    outputThroughput: durationS > 0 ? outTokens / durationS : 0,
    totalInputTokens: ok.reduce((s, r) => s + r.promptLen, 0),
    totalOutputTokens: outTokens,
    ttftMs: distribution(ok.map((r) => r.ttftMs)),
    tpotMs: distribution(tpot),
    itlMs: distribution(ok.flatMap((r) => r.itlMs)),
    e2eMs: distribution(ok.map((r) => r.e2eMs)),
  };
}
