/**
 * The tensor-parallel rank a worker-side connector runs on: rank 0 on the engine's own thread,
 * else the rank the engine gave its worker thread (engine/runner/thread-executor.ts passes it in
 * workerData).
 */
import { isMainThread, workerData } from 'node:worker_threads';

export function workerTpRank(): number {
  if (isMainThread) return 0;
  const rank = (workerData as { tpRank?: unknown } | null)?.tpRank;
  return typeof rank === 'number' ? rank : 0;
}
