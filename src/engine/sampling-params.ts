/** Sampling parameters with vLLM's defaults, and the dummy request of a rejected hand-off. */
import type { KVTransferParams } from '../connector/types.ts';
import type { GenerateRequest, SamplingParams } from './api.ts';

/** vLLM's SamplingParams defaults (max_tokens 16, temperature 1.0, top_p 1, top_k off). */
export const DEFAULT_SAMPLING_PARAMS: Readonly<SamplingParams> = {
  maxTokens: 16,
  temperature: 1,
  topP: 1,
  topK: 0,
  seed: null,
  stop: [],
  stopTokenIds: [],
  ignoreEos: false,
  logprobs: null,
};

export function samplingParams(overrides: Partial<SamplingParams> = {}): SamplingParams {
  return { ...DEFAULT_SAMPLING_PARAMS, ...overrides };
}

/**
 * docs/scheduler.md#delayed-free-and-aborts: vLLM's dummy request for a request rejected
 * before admission — one prompt token, one greedy output token — carrying the params so the
 * connector's requestFinished still runs and the prefill peer frees what it pinned.
 */
export function rejectedKvTransferRequest(requestId: string, params: KVTransferParams): GenerateRequest {
  return {
    requestId,
    promptTokenIds: [0],
    sampling: samplingParams({ maxTokens: 1, temperature: 0, ignoreEos: true }),
    kvTransferParams: params,
  };
}
