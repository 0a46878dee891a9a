/**
 * An executor without a model, for simulation (`kvconnect bench trace --simulate`) and for
 * `serve --mode random|echo`: every scheduled request whose computed tokens reach its end
 * "samples" a token (a fixed one, or `nextToken`'s: ./synthetic-tokens.ts), so the
 * real scheduler, KV cache manager, connector scheduler side and event path run exactly as
 * they would, at the cost of bookkeeping only. A connector's worker side, if the simulation
 * wants one, is stood in for by `connectorOutput`.
 */
import type {
  KVConnectorHandshakeMetadata,
  KVConnectorOutput,
  SchedulerOutput,
} from '../../connector/types.ts';
import type { ModelRunnerOutput, RunnerInput } from '../runner-io.ts';
import type { ModelExecutor } from './executor.ts';

export interface SimulatedExecutorOptions {
  /** The scheduler's view of a request (its tokens so far and how many are computed). */
  lookup: (reqId: string) => { numComputedTokens: number; numTokens: number } | undefined;
  /** Token id every completed sequence step samples. */
  sampledToken?: number;
  /** The token a completed sequence step samples (wins over sampledToken). */
  nextToken?: (reqId: string) => number;
  /** What the connector's worker side would report for this step (null: no connector). */
  connectorOutput?: (out: SchedulerOutput) => KVConnectorOutput | null;
}

export class SimulatedExecutor implements ModelExecutor {
  readonly tpSize = 1;
  readonly handshakeMetadata: Record<number, KVConnectorHandshakeMetadata> = {};
  readonly #opts: SimulatedExecutorOptions;

  constructor(opts: SimulatedExecutorOptions) {
    this.#opts = opts;
  }

  async execute(input: RunnerInput): Promise<ModelRunnerOutput> {
    const out = input.schedulerOutput;
    const result: ModelRunnerOutput = {
      reqIds: [],
      sampledTokenIds: [],
      logprobs: [],
      topLogprobs: [],
      kvConnectorOutput: this.#opts.connectorOutput?.(out) ?? null,
    };
    const fixed = this.#opts.sampledToken ?? 0;
    const nextToken = this.#opts.nextToken;
    for (const [id, n] of Object.entries(out.numScheduledTokens)) {
      if (n <= 0) continue;
      const req = this.#opts.lookup(id);
      result.reqIds.push(id);
      // The scheduler advanced numComputedTokens when it scheduled the step.
      const samples = req !== undefined && req.numComputedTokens >= req.numTokens;
      result.sampledTokenIds.push(samples ? [nextToken ? nextToken(id) : fixed] : []);
      result.logprobs.push(null);
      result.topLogprobs.push(null);
    }
    return result;
  }

  async shutdown(): Promise<void> {}
}
