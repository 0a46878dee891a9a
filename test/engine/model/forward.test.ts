import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { loadModelTensors, modelFromTensors } from '../../../src/engine/model/load.ts';
import { referenceForward } from '../../../src/engine/model/reference-model.ts';
import { argmax, BlockAllocator, makeKV, maxAbsDiff, textTokens } from './helpers/model.ts';

const TOL = 2e-3;

for (const name of ['tiny', 'tiny-hybrid']) {
  describe(`paged forward of ${name}`, () => {
    const { config, tensors } = loadModelTensors(name);
    const model = modelFromTensors(config, tensors);
    const V = config.vocab_size;
    // Longer than the sliding window (32) so the window matters.
    const prompt = textTokens('Paged attention reads K and V through block tables.');
    const T = prompt.length;
    const ref = referenceForward(config, tensors, prompt);

    test('one-shot prefill equals the contiguous reference at every position', async () => {
      const kv = makeKV(config);
      const alloc = new BlockAllocator(kv.numBlocks, 7);
      const blockTables = alloc.tables(kv.kvCacheConfig.groups.length, T, 16);
      // Every prefix length as its own sequence in one batch: checks all positions.
      for (const cut of [1, 17, 33, T]) {
        const tables = alloc.tables(kv.kvCacheConfig.groups.length, cut, 16);
        const logits = await model.forward(
          {
            tokenIds: Int32Array.from(prompt.slice(0, cut)),
            sequences: [
              { start: 0, len: cut, numComputedTokens: 0, blockTables: tables, computeLogits: true },
            ],
          },
          kv,
        );
        assert.ok(maxAbsDiff(logits, ref, (cut - 1) * V) < TOL, `prefix ${cut}`);
      }
      const full = await model.forward(
        {
          tokenIds: Int32Array.from(prompt),
          sequences: [{ start: 0, len: T, numComputedTokens: 0, blockTables, computeLogits: true }],
        },
        kv,
      );
      assert.equal(full.length, V);
      assert.ok(maxAbsDiff(full, ref, (T - 1) * V) < TOL);
    });

    test('prefill then one-token decode steps equal the reference', async () => {
      const kv = makeKV(config);
      const alloc = new BlockAllocator(kv.numBlocks, 11);
      const tables = alloc.tables(kv.kvCacheConfig.groups.length, T, 16);
      const first = 20;
      await model.forward(
        {
          tokenIds: Int32Array.from(prompt.slice(0, first)),
          sequences: [
            { start: 0, len: first, numComputedTokens: 0, blockTables: tables, computeLogits: false },
          ],
        },
        kv,
      );
      for (let p = first; p < T; p++) {
        const logits = await model.forward(
          {
            tokenIds: Int32Array.of(prompt[p] as number),
            sequences: [{ start: 0, len: 1, numComputedTokens: p, blockTables: tables, computeLogits: true }],
          },
          kv,
        );
        assert.ok(maxAbsDiff(logits, ref, p * V) < TOL, `decode at position ${p}`);
      }
    });

    test('chunked prefill, batched with another sequence, equals one-shot prefill', async () => {
      const kv = makeKV(config);
      const alloc = new BlockAllocator(kv.numBlocks, 13);
      const groups = kv.kvCacheConfig.groups.length;
      const a = alloc.tables(groups, T, 16);
      const other = textTokens('another request');
      const b = alloc.tables(groups, other.length, 16);
      const otherRef = referenceForward(config, tensors, other);
      let done = 0;
      let last: Float32Array | null = null;
      for (const chunk of [7, 16, 9, T]) {
        const len = Math.min(chunk, T - done);
        if (len <= 0) break;
        const batchTokens = [...prompt.slice(done, done + len)];
        const sequences = [
          { start: 0, len, numComputedTokens: done, blockTables: a, computeLogits: done + len === T },
        ];
        if (done === 0) {
          sequences.push({
            start: len,
            len: other.length,
            numComputedTokens: 0,
            blockTables: b,
            computeLogits: true,
          });
          batchTokens.push(...other);
        }
        const logits = await model.forward({ tokenIds: Int32Array.from(batchTokens), sequences }, kv);
        if (done === 0)
          assert.ok(maxAbsDiff(logits.subarray(logits.length - V), otherRef, (other.length - 1) * V) < TOL);
        done += len;
        if (done === T) last = logits;
      }
      assert.ok(last !== null);
      assert.ok(maxAbsDiff(last, ref, (T - 1) * V) < TOL);
    });

    test('bfloat16 KV stays close to float32 and keeps the greedy token', async () => {
      const kv = makeKV(config, { dtype: 'bfloat16' });
      const tables = new BlockAllocator(kv.numBlocks, 17).tables(kv.kvCacheConfig.groups.length, T, 16);
      const logits = await model.forward(
        {
          tokenIds: Int32Array.from(prompt),
          sequences: [{ start: 0, len: T, numComputedTokens: 0, blockTables: tables, computeLogits: true }],
        },
        kv,
      );
      assert.ok(maxAbsDiff(logits, ref, (T - 1) * V) < 0.2);
      assert.equal(argmax(logits), argmax(ref.subarray((T - 1) * V)));
    });
  });
}

test('greedy generation from tiny is not one repeated token', async () => {
  const { config, tensors } = loadModelTensors('tiny');
  const model = modelFromTensors(config, tensors);
  let varied = 0;
  const prompts = ['Hello, world', 'KV cache transfer', '12345', 'disaggregated prefill'];
  for (const text of prompts) {
    const kv = makeKV(config);
    const prompt = textTokens(text);
    const tables = new BlockAllocator(kv.numBlocks, 3).tables(1, prompt.length + 24, 16);
    let logits = await model.forward(
      {
        tokenIds: Int32Array.from(prompt),
        sequences: [
          { start: 0, len: prompt.length, numComputedTokens: 0, blockTables: tables, computeLogits: true },
        ],
      },
      kv,
    );
    const out: number[] = [];
    for (let i = 0; i < 24; i++) {
      const tok = argmax(logits);
      out.push(tok);
      logits = await model.forward(
        {
          tokenIds: Int32Array.of(tok),
          sequences: [
            {
              start: 0,
              len: 1,
              numComputedTokens: prompt.length + i,
              blockTables: tables,
              computeLogits: true,
            },
          ],
        },
        kv,
      );
    }
    if (new Set(out).size >= 6) varied++;
  }
  assert.ok(varied >= 3, `only ${varied} of ${prompts.length} prompts gave varied output`);
});

test('sliding-window layers never read blocks outside the window (null block poisoned)', async () => {
  const { config, tensors } = loadModelTensors('tiny-hybrid');
  const model = modelFromTensors(config, tensors);
  const V = config.vocab_size;
  const W = config.sliding_window as number;
  const prompt = textTokens('A sliding window of thirty-two tokens drops old blocks as decoding goes on.');
  const ref = referenceForward(config, tensors, prompt);
  const kv = makeKV(config);
  for (const t of kv.tensors) new Float32Array(t.buffer, 0, t.blockBytes / 4).fill(Number.NaN);
  const groups = kv.kvCacheConfig.groups;
  const tables = new BlockAllocator(kv.numBlocks, 5).tables(groups.length, prompt.length, 16);
  await model.forward(
    {
      tokenIds: Int32Array.from(prompt.slice(0, 40)),
      sequences: [{ start: 0, len: 40, numComputedTokens: 0, blockTables: tables, computeLogits: false }],
    },
    kv,
  );
  for (let p = 40; p < prompt.length; p++) {
    groups.forEach((g, gi) => {
      if (g.spec.kind !== 'sliding_window') return;
      const table = tables[gi] as number[];
      for (let b = 0; (b + 1) * 16 <= p - W + 1; b++) table[b] = 0;
    });
    const logits = await model.forward(
      {
        tokenIds: Int32Array.of(prompt[p] as number),
        sequences: [{ start: 0, len: 1, numComputedTokens: p, blockTables: tables, computeLogits: true }],
      },
      kv,
    );
    assert.ok(maxAbsDiff(logits, ref, p * V) < TOL, `position ${p}`);
  }
  assert.ok(groups.some((g) => g.spec.kind === 'sliding_window'));
});
