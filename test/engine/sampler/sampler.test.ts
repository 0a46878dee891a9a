import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SeededRandom } from '../../../src/engine/model/prng.ts';
import { requestRandom, Sampler, type SamplerParams } from '../../../src/engine/sampler/sampler.ts';

const rng0 = new SeededRandom(123);
const logits = Float32Array.from({ length: 64 }, () => rng0.nextGaussian() * 2);
const argmax = logits.indexOf(Math.max(...logits));
const params = (p: Partial<SamplerParams>): SamplerParams => ({
  temperature: 1,
  topK: 0,
  topP: 1,
  logprobs: null,
  ...p,
});

test('greedy (temperature 0) is the argmax, and top-k = 1 is greedy too', () => {
  const s = new Sampler();
  assert.equal(s.sample(logits, params({ temperature: 0 }), new SeededRandom(1)).tokenId, argmax);
  for (let seed = 0; seed < 20; seed++) {
    assert.equal(
      s.sample(logits, params({ temperature: 1.5, topK: 1 }), new SeededRandom(seed)).tokenId,
      argmax,
    );
  }
});

test('the same seed gives the same tokens; different seeds differ', () => {
  const s = new Sampler();
  const draw = (seed: number) => {
    const rng = requestRandom(seed);
    return Array.from({ length: 30 }, () => s.sample(logits, params({ temperature: 1.2 }), rng).tokenId);
  };
  assert.deepEqual(draw(7), draw(7));
  assert.notDeepEqual(draw(7), draw(8));
  assert.ok(new Set(draw(7)).size > 3, 'temperature sampling should not be constant');
});

test('top-k and top-p restrict the support to the most likely tokens', () => {
  const s = new Sampler();
  const order = [...logits.keys()].sort((a, b) => logits[b]! - logits[a]!);
  const rng = new SeededRandom(99);
  const seenK = new Set<number>();
  for (let i = 0; i < 400; i++) seenK.add(s.sample(logits, params({ topK: 5 }), rng).tokenId);
  assert.ok([...seenK].every((t) => order.slice(0, 5).includes(t)));
  assert.ok(seenK.size > 1);
  // The smallest prefix of the sorted distribution whose mass reaches topP.
  const max = logits[argmax]!;
  const probs = order.map((t) => Math.exp(logits[t]! - max));
  const total = probs.reduce((a, b) => a + b, 0);
  let cum = 0;
  let nucleus = 0;
  while (cum < 0.6 * total) cum += probs[nucleus++]!;
  const seenP = new Set<number>();
  for (let i = 0; i < 400; i++) seenP.add(s.sample(logits, params({ topP: 0.6 }), rng).tokenId);
  assert.ok(
    [...seenP].every((t) => order.slice(0, nucleus).includes(t)),
    `outside the ${nucleus}-token nucleus`,
  );
  assert.ok(seenP.size > 1 && seenP.size <= nucleus);
});

test('logprobs: chosen token, top-N sorted, and they sum to ~1 over the vocabulary', () => {
  const s = new Sampler();
  const r = s.sample(logits, params({ temperature: 0, logprobs: 64 }), new SeededRandom(0));
  assert.equal(r.topLogprobs?.length, 64);
  const sum = r.topLogprobs!.reduce((a, t) => a + Math.exp(t.logprob), 0);
  assert.ok(Math.abs(sum - 1) < 1e-5);
  assert.equal(r.topLogprobs![0]!.tokenId, argmax);
  assert.equal(r.logprob, r.topLogprobs![0]!.logprob);
  for (let i = 1; i < 64; i++) assert.ok(r.topLogprobs![i - 1]!.logprob >= r.topLogprobs![i]!.logprob);
  const top3 = s.sample(logits, params({ temperature: 0, logprobs: 3 }), new SeededRandom(0)).topLogprobs!;
  assert.deepEqual(top3, r.topLogprobs!.slice(0, 3));
  assert.equal(s.sample(logits, params({ temperature: 0 }), new SeededRandom(0)).topLogprobs, null);
});

test('without logprobs no normalizer is computed: the same token, logprob null; logprobs 0 gives the chosen one', () => {
  const s = new Sampler();
  const withLp = s.sample(logits, params({ temperature: 0, logprobs: 2 }), new SeededRandom(0));
  const greedy = s.sample(logits, params({ temperature: 0 }), new SeededRandom(0));
  assert.deepEqual(greedy, { tokenId: argmax, logprob: null, topLogprobs: null });
  assert.equal(withLp.tokenId, argmax);
  const zero = s.sample(logits, params({ temperature: 0, logprobs: 0 }), new SeededRandom(0));
  assert.deepEqual(zero, { tokenId: argmax, logprob: withLp.logprob, topLogprobs: null });
  // Random sampling draws the same tokens whether or not logprobs are asked for.
  const draw = (logprobs: number | null) => {
    const rng = new SeededRandom(5);
    return Array.from({ length: 20 }, () => s.sample(logits, params({ temperature: 0.8, logprobs }), rng));
  };
  const plain = draw(null);
  const scored = draw(1);
  assert.deepEqual(
    plain.map((t) => t.tokenId),
    scored.map((t) => t.tokenId),
  );
  assert.ok(plain.every((t) => t.logprob === null && t.topLogprobs === null));
  assert.ok(scored.every((t) => t.logprob !== null && t.logprob < 0 && t.topLogprobs?.length === 1));
});
