/**
 * An executor runs one step on every tensor-parallel rank and returns one ModelRunnerOutput
 * (vLLM's Executor + KVOutputAggregator). tp = 1 runs the rank in the engine's thread
 * (./local-executor.ts); tp > 1 runs one worker thread per rank (./thread-executor.ts).
 */
import type { KVConnectorHandshakeMetadata, KVConnectorOutput } from '../../connector/types.ts';
import type { ModelRunnerOutput, RunnerInput } from '../runner-io.ts';

export interface ModelExecutor {
  readonly tpSize: number;
  /** Handshake metadata of every rank whose connector published one, keyed by tp rank. */
  readonly handshakeMetadata: Record<number, KVConnectorHandshakeMetadata>;
  execute(input: RunnerInput): Promise<ModelRunnerOutput>;
  shutdown(): Promise<void>;
  /**
   * Installs the engine's wake-up on the ranks' worker-side connectors
   * (KVConnectorBase.setEngineWakeup): called directly by a rank in the engine's thread, and
   * through a message by a rank in its own thread.
   */
  setKvWakeup?(wakeup: () => void): void;
}

/** Folds the connector outputs of all ranks of one step into one (rank 0's slot). */
export interface ConnectorOutputAggregator {
  aggregate(outputs: readonly KVConnectorOutput[]): KVConnectorOutput;
}

/** Rank 0's output carrying the aggregated connector output of all ranks. */
export function mergeRankOutputs(
  outputs: readonly ModelRunnerOutput[],
  aggregator: ConnectorOutputAggregator | null,
): ModelRunnerOutput {
  const first = outputs[0];
  if (!first) throw new Error('mergeRankOutputs needs at least one rank output');
  const connectorOutputs = outputs.map((o) => o.kvConnectorOutput).filter((o) => o !== null);
  if (connectorOutputs.length === 0 || !aggregator) return first;
  return { ...first, kvConnectorOutput: aggregator.aggregate(connectorOutputs) };
}
