/** DecodeBenchConnector's kv_connector_extra_config (docs/connectors/decode-bench.md). */
import { type ExtraConfigSchema, readExtraConfig } from '../../config/extra-config.ts';

export interface DecodeBenchConfig {
  /** Mean of the fill values (default 0.015). */
  fillMean: number;
  /** Standard deviation; 0 (the default) fills a constant. */
  fillStd: number;
}

export const DEFAULT_FILL_MEAN = 0.015;
export const DEFAULT_FILL_STD = 0;

export const DECODE_BENCH_EXTRA_CONFIG = {
  connector: 'DecodeBenchConnector',
  fields: {
    fill_mean: { type: 'number', default: DEFAULT_FILL_MEAN },
    fill_std: { type: 'number', default: DEFAULT_FILL_STD, min: 0 },
  },
} as const satisfies ExtraConfigSchema;

export function parseDecodeBenchConfig(extra: Record<string, unknown>): DecodeBenchConfig {
  const v = readExtraConfig(DECODE_BENCH_EXTRA_CONFIG, extra);
  return { fillMean: v.fill_mean, fillStd: v.fill_std };
}
