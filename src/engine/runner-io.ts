/**
 * What the engine hands the model runner each step, and what comes back (vLLM's
 * SchedulerOutput → ModelRunnerOutput). Plain data: tensor-parallel ranks are threads.
 */
import type { KVConnectorOutput, SchedulerOutput } from '../connector/types.ts';
import type { PositionLogprobs, SamplingParams } from './api.ts';
import type { LoRARequest } from './lora/lora-request.ts';

export interface RunnerInput {
  schedulerOutput: SchedulerOutput;
  /** Sampling parameters of the requests scheduled for the first time in this step. */
  newRequestSampling: Record<string, SamplingParams>;
  /** The adapters of the requests scheduled for the first time in this step (absent: none). */
  newRequestLora?: Record<string, LoRARequest>;
}

export interface ModelRunnerOutput {
  /** Requests that ran this step, in a stable order. */
  reqIds: string[];
  /** Per request (same order): tokens sampled this step; [] for a partial prefill chunk. */
  sampledTokenIds: number[][];
  /** Per request: logprob of each sampled token, or null when not requested. */
  logprobs: (number[] | null)[];
  /** Per request: top logprobs per sampled token, or null when not requested. */
  topLogprobs: (Array<Array<{ tokenId: number; logprob: number }>> | null)[];
  /** Per request: the prompt's logprobs on the step that samples its first token (absent: none). */
  promptLogprobs?: ((PositionLogprobs | null)[] | null)[];
  /** The connector output aggregated over all tensor-parallel ranks (null without a connector). */
  kvConnectorOutput: KVConnectorOutput | null;
}
