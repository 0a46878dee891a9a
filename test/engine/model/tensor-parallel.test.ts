import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { HFModelConfig } from '../../../src/config/model-presets.ts';
import type { LlamaModel } from '../../../src/engine/model/llama.ts';
import { loadModelTensors, modelFromTensors } from '../../../src/engine/model/load.ts';
import { KVError } from '../../../src/errors/index.ts';
import type { SharedPagedKVMemory } from '../../../src/kv/paged-memory.ts';
import { argmax, BlockAllocator, makeKV, maxAbsDiff, textTokens } from './helpers/model.ts';

/** Runs every rank concurrently; allReduce sums in place once all ranks have arrived. */
function inProcessAllReduce(tpSize: number): (rank: number) => (x: Float32Array) => Promise<void> {
  let pending: { x: Float32Array; resolve: () => void }[] = [];
  return () => (x) =>
    new Promise<void>((resolve) => {
      pending.push({ x, resolve });
      if (pending.length < tpSize) return;
      const sum = new Float32Array(x.length);
      for (const p of pending) for (let i = 0; i < sum.length; i++) sum[i] = sum[i]! + p.x[i]!;
      for (const p of pending) {
        p.x.set(sum);
        p.resolve();
      }
      pending = [];
    });
}

async function runRanks(
  config: HFModelConfig,
  ranks: LlamaModel[],
  kvs: SharedPagedKVMemory[],
  tokens: number[][],
): Promise<Float32Array[]> {
  const hook = inProcessAllReduce(ranks.length);
  const tables = new BlockAllocator(kvs[0]!.numBlocks, 9).tables(kvs[0]!.kvCacheConfig.groups.length, 64, 16);
  const results: Float32Array[][] = ranks.map(() => []);
  let done = 0;
  for (const step of tokens) {
    const outs = await Promise.all(
      ranks.map((m, r) =>
        m.forward(
          {
            tokenIds: Int32Array.from(step),
            sequences: [
              {
                start: 0,
                len: step.length,
                numComputedTokens: done,
                blockTables: tables,
                computeLogits: true,
              },
            ],
          },
          kvs[r]!,
          { allReduce: hook(r) },
        ),
      ),
    );
    outs.forEach((o, r) => {
      results[r]!.push(o);
    });
    done += step.length;
  }
  for (const r of results.slice(1)) {
    r.forEach((o, i) => {
      assert.deepEqual(o, results[0]![i]);
    });
  }
  assert.equal(config.vocab_size, results[0]![0]!.length);
  return results[0]!;
}

for (const [name, tpSize] of [
  ['tiny', 2],
  ['tiny-hybrid', 2],
  ['tiny', 4],
] as const) {
  test(`${name}: tp=${tpSize} shards equal tp=1 (prefill and decode)`, async () => {
    const { config, tensors } = loadModelTensors(name);
    const prompt = textTokens('tensor parallel ranks');
    const steps = [prompt, [101], [102], [103]];
    const single = await runRanks(config, [modelFromTensors(config, tensors)], [makeKV(config)], steps);
    const ranks = Array.from({ length: tpSize }, (_, r) =>
      modelFromTensors(config, tensors, { tpRank: r, tpSize }),
    );
    assert.equal(ranks[0]!.shard.numHeads, config.num_attention_heads / tpSize);
    const kvs = ranks.map(() => makeKV(config, { tpSize }));
    const sharded = await runRanks(config, ranks, kvs, steps);
    for (let i = 0; i < steps.length; i++) {
      assert.ok(maxAbsDiff(sharded[i]!, single[i]!) < 1e-3, `step ${i}`);
      assert.equal(argmax(sharded[i]!), argmax(single[i]!));
    }
  });
}

test('tp without an allReduce hook, or with a size that does not divide the heads, is a KVError', async () => {
  const { config, tensors } = loadModelTensors('tiny');
  assert.throws(
    () => modelFromTensors(config, tensors, { tpRank: 0, tpSize: 3 }),
    (e: unknown) => e instanceof KVError && e.code === 'TP_SIZE_INVALID',
  );
  const rank = modelFromTensors(config, tensors, { tpRank: 1, tpSize: 2 });
  const kv = makeKV(config, { tpSize: 2 });
  await assert.rejects(
    rank.forward(
      {
        tokenIds: Int32Array.of(1),
        sequences: [{ start: 0, len: 1, numComputedTokens: 0, blockTables: [[1]], computeLogits: true }],
      },
      kv,
    ),
    (e: unknown) => e instanceof KVError && e.code === 'TP_ALLREDUCE_MISSING',
  );
});
