/**
 * Numeric fields every secondary tier's entry may carry (`timeout_ms`, thread counts),
 * parsed one way for the fs, Redis, module and obj tiers.
 */
import { configError } from '../../config/config-error.ts';
import { parseExtraNumber } from '../../config/extra-config.ts';

/** `timeout_ms`: a positive number of milliseconds, `fallback` when absent. */
export function parseTimeoutMs(tier: Record<string, unknown>, where: string, fallback: number): number {
  const raw = tier['timeout_ms'];
  if (raw === undefined || raw === null) return fallback;
  const n = parseExtraNumber(raw);
  if (n === null || n <= 0) {
    throw configError(
      `${where}.timeout_ms`,
      'a positive number of milliseconds',
      raw,
      `Use e.g. ${fallback}.`,
    );
  }
  return n;
}

/** A positive integer field (a thread count), `fallback` when absent. */
export function parseCount(
  tier: Record<string, unknown>,
  key: string,
  where: string,
  fallback: number,
): number {
  const raw = tier[key];
  if (raw === undefined || raw === null) return fallback;
  const n = parseExtraNumber(raw);
  if (n === null || !Number.isInteger(n) || n < 1) {
    throw configError(`${where}.${key}`, 'a positive integer', raw, `Use e.g. ${fallback} (the default).`);
  }
  return n;
}
