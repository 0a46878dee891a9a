/** DecodeBenchConnector: synthetic KV for decode-only benchmarks. */
export { BlockFiller } from './block-filler.ts';
export {
  DEFAULT_FILL_MEAN,
  DEFAULT_FILL_STD,
  type DecodeBenchConfig,
  parseDecodeBenchConfig,
} from './config.ts';
export { DecodeBenchConnector } from './connector.ts';
export type { DecodeBenchStatsData } from './stats.ts';
export type { DecodeBenchFill, DecodeBenchMetadata } from './step-metadata.ts';
