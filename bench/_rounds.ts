/**
 * How the benchmarks report: every headline figure is the median of several rounds with
 * its min–max (never the best round), measured against a baseline of the same run, and
 * the two sides alternate (A B, B A, A B, ...) so drift on a shared machine hits both.
 */
import { loadavg } from 'node:os';

export interface Summary {
  median: number;
  min: number;
  max: number;
  n: number;
}

export function median(values: readonly number[]): number {
  return summarize(values).median;
}

export function summarize(values: readonly number[]): Summary {
  const sorted = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  const n = sorted.length;
  if (n === 0) return { median: Number.NaN, min: Number.NaN, max: Number.NaN, n: 0 };
  const mid = Math.floor(n / 2);
  const med = n % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
  return { median: med, min: sorted[0]!, max: sorted[n - 1]!, n };
}

/** "median (min–max)". */
export function fmt(s: Summary, digits = 0): string {
  return `${s.median.toFixed(digits)} (${s.min.toFixed(digits)}–${s.max.toFixed(digits)})`;
}

/** For the JSON line: {median, min, max} rounded. */
export function json(s: Summary, digits = 3): { median: number; min: number; max: number } {
  const r = (x: number): number => Number(x.toFixed(digits));
  return { median: r(s.median), min: r(s.min), max: r(s.max) };
}

/** Runs `rounds` rounds of A and B, alternating which goes first; returns both series. */
export async function alternate<A, B>(
  rounds: number,
  a: (round: number) => Promise<A>,
  b: (round: number) => Promise<B>,
): Promise<{ a: A[]; b: B[] }> {
  const out: { a: A[]; b: B[] } = { a: [], b: [] };
  for (let i = 0; i < rounds; i++) {
    if (i % 2 === 0) {
      out.a.push(await a(i));
      out.b.push(await b(i));
    } else {
      out.b.push(await b(i));
      out.a.push(await a(i));
    }
  }
  return out;
}

/** Per-round ratios b[i] / a[i], summarized. */
export function pairwiseRatio(a: readonly number[], b: readonly number[]): Summary {
  return summarize(a.map((x, i) => (b[i] ?? Number.NaN) / x));
}

/** The 1-minute load average, for the record (figures on a shared machine depend on it). */
export function loadAverage(): number {
  return Number(loadavg()[0]!.toFixed(2));
}
