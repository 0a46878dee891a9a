import assert from 'node:assert/strict';
import { test } from 'node:test';
import { getModelPreset, type HFModelConfig } from '../../../src/config/model-presets.ts';
import type { KVCacheDtype } from '../../../src/config/types.ts';
import type { LlamaModel } from '../../../src/engine/model/llama.ts';
import { modelFromTensors } from '../../../src/engine/model/load.ts';
import { referenceForward } from '../../../src/engine/model/reference-model.ts';
import { generatePresetTensors } from '../../../src/engine/model/weights.ts';
import { BlockAllocator, makeKV, maxAbsDiff, textTokens } from './helpers/model.ts';

/** tiny with other head layouts: GQA group 4 (the preset), group 2, and plain multi-head. */
function variant(name: string, heads: number, kvHeads: number, extra: Partial<HFModelConfig> = {}) {
  const base = getModelPreset(name);
  assert.ok(base);
  const config: HFModelConfig = {
    ...base.config,
    num_attention_heads: heads,
    num_key_value_heads: kvHeads,
    ...extra,
  };
  const tensors = generatePresetTensors({ ...base, config });
  return { config, tensors, model: modelFromTensors(config, tensors) };
}

const prompt = textTokens('Decode attention walks the block table without gathering the context.');
const T = prompt.length;

/**
 * Prefills the first `first` tokens, then feeds the rest in steps of `step` tokens, all in
 * one batch with a second sequence decoding one token at a time; returns the logits of the
 * main sequence's last token after every step.
 */
async function run(
  model: LlamaModel,
  config: HFModelConfig,
  dtype: KVCacheDtype,
  first: number,
  step: number,
): Promise<Float32Array[]> {
  const kv = makeKV(config, { dtype });
  const alloc = new BlockAllocator(kv.numBlocks, 5);
  const groups = kv.kvCacheConfig.groups.length;
  const main = alloc.tables(groups, T, 16);
  const side = alloc.tables(groups, T, 16);
  const sideTokens = textTokens('a second sequence in the same batch, one token per step');
  await model.forward(
    {
      tokenIds: Int32Array.from([...prompt.slice(0, first), ...sideTokens.slice(0, first)]),
      sequences: [
        { start: 0, len: first, numComputedTokens: 0, blockTables: main, computeLogits: false },
        { start: first, len: first, numComputedTokens: 0, blockTables: side, computeLogits: false },
      ],
    },
    kv,
  );
  const out: Float32Array[] = [];
  let sidePos = first;
  for (let done = first; done < T; done += step) {
    const len = Math.min(step, T - done);
    const logits = await model.forward(
      {
        tokenIds: Int32Array.from([
          ...prompt.slice(done, done + len),
          sideTokens[sidePos % sideTokens.length] as number,
        ]),
        sequences: [
          { start: 0, len, numComputedTokens: done, blockTables: main, computeLogits: true },
          { start: len, len: 1, numComputedTokens: sidePos, blockTables: side, computeLogits: true },
        ],
      },
      kv,
    );
    sidePos++;
    out.push(logits.slice(0, config.vocab_size));
  }
  return out;
}

const cases = [
  { label: 'tiny (GQA group 4)', make: () => variant('tiny', 8, 2) },
  { label: 'group 2', make: () => variant('tiny', 8, 4) },
  { label: 'multi-head (group 1)', make: () => variant('tiny', 4, 4, { head_dim: 64 }) },
  { label: 'tiny-hybrid (sliding window 32)', make: () => variant('tiny-hybrid', 8, 2) },
];

for (const { label, make } of cases) {
  test(`${label}: decode attention over the paged blocks equals the reference model`, async () => {
    const { config, tensors, model } = make();
    const V = config.vocab_size;
    const ref = referenceForward(config, tensors, prompt);
    for (const step of [1, 3]) {
      const logits = await run(model, config, 'float32', 20, step);
      logits.forEach((row, i) => {
        const last = Math.min(20 + (i + 1) * step, T) - 1;
        assert.ok(maxAbsDiff(row, ref, last * V) < 2e-3, `step ${step}, position ${last}`);
      });
    }
  });
}

test('decode attention equals the gathering prefill attention, float32 and float16 KV', async () => {
  const { config, model } = variant('tiny-hybrid', 8, 2);
  for (const dtype of ['float32', 'float16'] as const) {
    model.decodeAttentionMaxTokens = 0;
    const gathered = await run(model, config, dtype, 9, 2);
    model.decodeAttentionMaxTokens = 4;
    const direct = await run(model, config, dtype, 9, 2);
    assert.equal(direct.length, gathered.length);
    // float16: a last-bit difference in one stored K/V value carries into later steps.
    const tol = dtype === 'float32' ? 1e-4 : 5e-3;
    direct.forEach((row, i) => {
      const diff = maxAbsDiff(row, gathered[i] as Float32Array);
      assert.ok(diff < tol, `${dtype} step ${i}: ${diff}`);
    });
  }
});
