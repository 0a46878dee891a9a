/** DecodeBenchConnector's stats (docs/connectors/decode-bench.md): blocks filled since the last report. */
export interface DecodeBenchStatsData {
  num_filled_blocks: number;
}
