/**
 * Config errors name the field, what was expected, what was received and how to fix it.
 * Python-style reprs are used where vLLM's message embeds a repr (`{x!r}`).
 */
import type { ErrorCode } from '../errors/codes.ts';
import { KVError } from '../errors/kv-error.ts';

export const CONFIG_INVALID: ErrorCode = 'KV_CONFIG_INVALID';

/** A short, bounded rendering of any received value for messages. */
export function describeValue(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (typeof value === 'string')
    return JSON.stringify(value.length > 80 ? `${value.slice(0, 77)}...` : value);
  if (typeof value === 'number' || typeof value === 'boolean' || value === null) return String(value);
  if (Array.isArray(value)) return `an array of length ${value.length}`;
  if (typeof value === 'object') return 'an object';
  return typeof value;
}

export function configError(
  field: string,
  expected: string,
  received: unknown,
  hint: string,
  code: ErrorCode = CONFIG_INVALID,
): KVError {
  return new KVError(
    code,
    `Invalid value for ${field}: expected ${expected}, received ${describeValue(received)}`,
    {
      field,
      hint,
      details: { expected, received: describeValue(received) },
    },
  );
}

/** Python's `str()` of a JSON-ish value (None/True/False spelled as Python does). */
export function pythonStr(value: unknown): string {
  if (value === null || value === undefined) return 'None';
  if (value === true) return 'True';
  if (value === false) return 'False';
  if (typeof value === 'string') return value;
  if (typeof value === 'number') return String(value);
  return JSON.stringify(value);
}

/** Edit distance, for "did you mean" hints. */
export function editDistance(a: string, b: string): number {
  const prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diag = prev[0]!;
    prev[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const up = prev[j]!;
      prev[j] = Math.min(up + 1, prev[j - 1]! + 1, diag + (a[i - 1] === b[j - 1] ? 0 : 1));
      diag = up;
    }
  }
  return prev[b.length]!;
}

/** Candidates closest to `input`: same name ignoring case first, then small edit distance or a shared prefix. */
export function closestNames(input: string, candidates: readonly string[], max = 3): string[] {
  const lower = input.toLowerCase();
  const scored = candidates
    .map((c) => {
      const cl = c.toLowerCase();
      let score = editDistance(lower, cl);
      if (cl === lower) score = -2;
      else if (lower.startsWith(cl) || cl.startsWith(lower)) score = Math.min(score, 0);
      return { c, score };
    })
    .filter(({ c, score }) => score <= Math.max(2, Math.floor(c.length / 3)))
    .sort((x, y) => x.score - y.score || x.c.localeCompare(y.c));
  const best = scored[0]?.score;
  return scored
    .filter(({ score }) => score === best)
    .slice(0, max)
    .map(({ c }) => c);
}

export function didYouMean(input: string, candidates: readonly string[]): string {
  const close = closestNames(input, candidates);
  if (close.length === 0) return '';
  return `did you mean ${close.map((c) => `'${c}'`).join(' or ')}?`;
}
