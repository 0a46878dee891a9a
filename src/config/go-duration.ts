/**
 * Durations written as llm-d-inference-sim (Go's time.ParseDuration) writes them: one or more
 * decimal numbers, each with a unit — `12ms`, `250us`, `1.5s`, `1h30m` — an optional sign, or
 * a bare `0`. Units: ns, us (µs, μs), ms, s, m, h. Values are whole nanoseconds, as in Go.
 */
import { configError } from './config-error.ts';

const UNIT_NS: Record<string, number> = {
  ns: 1,
  us: 1e3,
  µs: 1e3,
  μs: 1e3,
  ms: 1e6,
  s: 1e9,
  m: 60e9,
  h: 3600e9,
};

const TERM = /^(\d*)(?:\.(\d*))?(ns|us|µs|μs|ms|s|m|h)/;

/** Nanoseconds of a Go duration string, or null when it is not one. */
export function parseGoDuration(text: string): number | null {
  let rest = text;
  let sign = 1;
  if (rest.startsWith('-') || rest.startsWith('+')) {
    if (rest[0] === '-') sign = -1;
    rest = rest.slice(1);
  }
  if (rest === '0') return 0;
  if (rest === '') return null;
  let total = 0;
  while (rest.length > 0) {
    const m = TERM.exec(rest);
    if (!m) return null;
    const [whole, intPart = '', fracPart] = m;
    // Go needs a digit on one side of the point at least (".5s" and "5.s" are durations, ".s" is not).
    if (intPart === '' && (fracPart === undefined || fracPart === '')) return null;
    const unit = UNIT_NS[m[3] as string] as number;
    total += Number(intPart || '0') * unit + (fracPart ? Number(`0.${fracPart}`) * unit : 0);
    rest = rest.slice(whole.length);
  }
  return sign * Math.trunc(total);
}

/**
 * A duration option: a Go duration string (or 0). `field` names the option in the error,
 * which shows the accepted forms.
 */
export function durationOption(field: string, raw: unknown): number {
  if (raw === 0 || raw === '0') return 0;
  const ns = typeof raw === 'string' ? parseGoDuration(raw.trim()) : null;
  if (ns === null) {
    throw configError(
      field,
      'a duration with a unit, as llm-d-inference-sim writes it (e.g. 100ms, 250us, 1.5s)',
      raw,
      `Write --${field} 100ms (units: ns, us, ms, s, m, h); a bare number other than 0 has no unit.`,
    );
  }
  return ns;
}

/** A duration for messages and help: the largest unit that keeps it whole-ish (12ms, 250us). */
export function formatDuration(ns: number): string {
  if (ns === 0) return '0s';
  const abs = Math.abs(ns);
  if (abs >= 1e9) return `${ns / 1e9}s`;
  if (abs >= 1e6) return `${ns / 1e6}ms`;
  if (abs >= 1e3) return `${ns / 1e3}us`;
  return `${ns}ns`;
}
