/**
 * The penalties, min_tokens and logit_bias on known logits against vLLM's formulas, worked
 * out by hand here in float32 as vLLM computes them on its logits tensor:
 *   repetition (prompt or output tokens): v > 0 ? v * (1 / r) : v * r
 *   then v -= frequency * count(output), then v -= presence * (count(output) > 0)
 * min_tokens sets EOS and the stop tokens to -inf while the output is shorter; logit_bias is
 * added (clamped to [-100, 100]) before the penalties.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { processLogits } from '../../../src/engine/sampler/logits-processors.ts';
import { samplingParams } from '../../../src/engine/sampling-params.ts';

const f = Math.fround;
const RAW = Float32Array.from([2.5, -1.25, 0.75, 3, -0.5, 1.5, 0, 4]);

test('repetition, frequency and presence penalties: vLLM float32 formulas, token by token', () => {
  const [r, fr, pr] = [1.3, 0.7, 0.3];
  const p = samplingParams({ repetitionPenalty: r, frequencyPenalty: fr, presencePenalty: pr });
  // Prompt has 0 and 1; output has 2 twice, 3 once and 1 once; 4..7 are unseen.
  const got = processLogits(RAW, p, { promptTokenIds: [0, 1, 0], outputTokenIds: [2, 3, 2, 1] });
  const rep = (v: number) => (v > 0 ? f(v * f(1 / f(r))) : f(v * f(r)));
  const out = (v: number, n: number) => f(f(v - f(f(fr) * n)) - f(f(pr) * 1));
  const expected = [
    rep(2.5), // prompt only: repetition, no frequency or presence
    out(rep(-1.25), 1), // prompt and output, negative: multiplied
    out(rep(0.75), 2),
    out(rep(3), 1),
    -0.5,
    1.5,
    0,
    4,
  ];
  assert.deepEqual([...got], expected);
  assert.deepEqual([...RAW], [2.5, -1.25, 0.75, 3, -0.5, 1.5, 0, 4], 'the raw row is left as it was');
});

test('each penalty alone, and a zero logit under repetition (multiplied: stays 0)', () => {
  const ctx = { promptTokenIds: [6], outputTokenIds: [5, 5, 5] };
  const only = (o: Parameters<typeof samplingParams>[0]) => [...processLogits(RAW, samplingParams(o), ctx)];
  const base = [...RAW];
  assert.deepEqual(only({ frequencyPenalty: 0.5 }), Object.assign([...base], { 5: 1.5 - 0.5 * 3 }));
  assert.deepEqual(
    only({ presencePenalty: -0.5 }),
    Object.assign([...base], { 5: 2 }),
    'a negative one encourages',
  );
  assert.deepEqual(only({ repetitionPenalty: 2 }), Object.assign([...base], { 5: 0.75, 6: 0 }));
  assert.deepEqual(only({ repetitionPenalty: 0.5 }), Object.assign([...base], { 5: 3 }), '< 1 encourages');
});

test('min_tokens masks EOS and the stop tokens until enough output; logit_bias is clamped and added first', () => {
  const p = samplingParams({ minTokens: 2, stopTokenIds: [3], eosTokenId: 7, logitBias: { 0: -1, 4: 250 } });
  const early = [...processLogits(RAW, p, { promptTokenIds: [], outputTokenIds: [1] })];
  assert.deepEqual(early, [1.5, -1.25, 0.75, -Infinity, 99.5, 1.5, 0, -Infinity]);
  const later = [...processLogits(RAW, p, { promptTokenIds: [], outputTokenIds: [1, 1] })];
  assert.deepEqual(later, [1.5, -1.25, 0.75, 3, 99.5, 1.5, 0, 4]);
  const ignoring = samplingParams({ minTokens: 2, eosTokenId: 7, ignoreEos: true });
  assert.equal(
    processLogits(RAW, ignoring, { promptTokenIds: [], outputTokenIds: [] })[7],
    4,
    'ignore_eos: EOS kept',
  );
  // The bias comes before repetition: a token biased positive is then divided.
  const both = samplingParams({ logitBias: { 4: 1 }, repetitionPenalty: 2 });
  assert.equal(processLogits(RAW, both, { promptTokenIds: [4], outputTokenIds: [] })[4], 0.25);
});
