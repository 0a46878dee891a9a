/** The runner's TokenSampler: src/engine/sampler with the request's SamplingParams. */
import type { SamplingParams } from '../api.ts';
import type { SeededRandom } from '../model/prng.ts';
import { type SampledToken, Sampler } from '../sampler/sampler.ts';
import type { TokenSampler } from './model-runner.ts';

export function createTokenSampler(): TokenSampler {
  const sampler = new Sampler();
  return {
    sample(
      logits: Float32Array,
      params: SamplingParams,
      rng: SeededRandom,
      processed?: Float32Array | null,
    ): SampledToken {
      return sampler.sample(
        logits,
        { temperature: params.temperature, topK: params.topK, topP: params.topP, logprobs: params.logprobs },
        rng,
        processed ?? null,
      );
    },
  };
}
