/** The nearest-rank percentile (p in 0..100) of values sorted ascending; NaN when there are none. */
export function nearestRankPercentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}
