/**
 * Reading one value of a JSON object another process sent, without trusting its type: each
 * reader returns the value when it has the expected form and null (or the fallback) otherwise.
 */

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A TCP port (1..65535), as a number or a string of digits. */
export function portOf(v: unknown): number | null {
  const n = typeof v === 'string' && /^\d+$/.test(v.trim()) ? Number(v.trim()) : v;
  return typeof n === 'number' && Number.isInteger(n) && n > 0 && n <= 65535 ? n : null;
}

/** An integer >= 0, as a number or a string of digits; `fallback` otherwise. */
export function nonNegativeIntOr(v: unknown, fallback: number): number {
  const n = typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : v;
  return typeof n === 'number' && Number.isInteger(n) && n >= 0 ? n : fallback;
}
