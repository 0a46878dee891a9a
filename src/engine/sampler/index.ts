export {
  requestRandom,
  type SampledToken,
  Sampler,
  type SamplerParams,
  type TokenLogprob,
  topLogprobs,
} from './sampler.ts';
