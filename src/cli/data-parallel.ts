/**
 * `serve --data-parallel-size N` in one process (vLLM's and llm-d-inference-sim's internal
 * data parallelism): N independent engines, rank r with its own server on port + r and its
 * KV-event ports offset by r (the publisher does that from the rank, and writes the rank into
 * every batch). With --data-parallel-rank the process is one rank of an external group, as
 * before. The ranks share nothing but the process.
 */
import { configError } from '../config/config-error.ts';
import type { EngineConfig } from '../config/types.ts';

/** One engine config per local rank (a single one for external data parallelism or N = 1). */
export function localRankConfigs(config: EngineConfig, externalRank: boolean): EngineConfig[] {
  const local = config.parallel.dataParallelSizeLocal;
  if (externalRank || local <= 1) return [config];
  if (config.kvTransferConfig) {
    throw configError(
      'data_parallel_size',
      '1 with a KV connector (several ranks in one process would share one engine_id and side channel)',
      config.parallel.dataParallelSize,
      'Run one `kvconnect serve --data-parallel-rank R` per rank, or drop --kv-transfer-config.',
    );
  }
  return Array.from({ length: local }, (_, r) => ({
    ...config,
    parallel: { ...config.parallel, dataParallelRank: config.parallel.dataParallelRank + r },
  }));
}

/** Rank r listens on port + r; port 0 (any free port) stays 0. */
export function rankPort(port: number, localRank: number): number {
  return port === 0 ? 0 : port + localRank;
}
