/** tp = 1: the only rank runs in the engine's own thread (no copies, no messages). */
import type { KVConnectorHandshakeMetadata } from '../../connector/types.ts';
import type { ModelRunnerOutput, RunnerInput } from '../runner-io.ts';
import { type ConnectorOutputAggregator, type ModelExecutor, mergeRankOutputs } from './executor.ts';
import type { ModelRunner } from './model-runner.ts';

export class LocalExecutor implements ModelExecutor {
  readonly tpSize = 1;
  readonly handshakeMetadata: Record<number, KVConnectorHandshakeMetadata>;
  readonly runner: ModelRunner;
  readonly #aggregator: ConnectorOutputAggregator | null;

  constructor(
    runner: ModelRunner,
    handshake: KVConnectorHandshakeMetadata | null,
    aggregator: ConnectorOutputAggregator | null,
  ) {
    this.runner = runner;
    this.handshakeMetadata = handshake ? { 0: handshake } : {};
    this.#aggregator = aggregator;
  }

  async execute(input: RunnerInput): Promise<ModelRunnerOutput> {
    const output = await this.runner.execute(input);
    return mergeRankOutputs([output], this.#aggregator);
  }

  setKvWakeup(wakeup: () => void): void {
    this.runner.connector?.setEngineWakeup(wakeup);
  }

  async shutdown(): Promise<void> {
    await this.runner.shutdown();
  }
}
