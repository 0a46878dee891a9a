/** DecodeBenchConnector's kv_connector_extra_config (spec §5.12). */
import { configError } from '../../config/config-error.ts';

export interface DecodeBenchConfig {
  /** Mean of the fill values (default 0.015). */
  fillMean: number;
  /** Standard deviation; 0 (the default) fills a constant. */
  fillStd: number;
}

export const DEFAULT_FILL_MEAN = 0.015;
export const DEFAULT_FILL_STD = 0;

function finiteNumber(extra: Record<string, unknown>, key: string, fallback: number, min?: number): number {
  const value = extra[key];
  if (value === undefined || value === null) return fallback;
  const n = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isFinite(n) || (min !== undefined && n < min)) {
    throw configError(
      `kv_connector_extra_config.${key}`,
      min === undefined ? 'a finite number' : `a finite number >= ${min}`,
      value,
      `Set "${key}" to a number, e.g. ${fallback}.`,
    );
  }
  return n;
}

export function parseDecodeBenchConfig(extra: Record<string, unknown>): DecodeBenchConfig {
  return {
    fillMean: finiteNumber(extra, 'fill_mean', DEFAULT_FILL_MEAN),
    fillStd: finiteNumber(extra, 'fill_std', DEFAULT_FILL_STD, 0),
  };
}
