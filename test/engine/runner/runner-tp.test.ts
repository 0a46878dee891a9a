import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildEngineConfig } from '../../../src/config/engine-config.ts';
import { getModelPreset } from '../../../src/config/model-presets.ts';
import type { SchedulerOutput } from '../../../src/connector/types.ts';
import type { ModelExecutor } from '../../../src/engine/runner/executor.ts';
import { LocalExecutor } from '../../../src/engine/runner/local-executor.ts';
import { setUpRank } from '../../../src/engine/runner/rank-setup.ts';
import { ThreadExecutor } from '../../../src/engine/runner/thread-executor.ts';
import { samplingParams } from '../../../src/engine/sampling-params.ts';
import { buildKVCacheConfig } from '../../../src/kv/kv-cache-config.ts';

const greedy = samplingParams({ maxTokens: 6, temperature: 0, ignoreEos: true });

function output(partial: Partial<SchedulerOutput>): SchedulerOutput {
  return {
    scheduledNewReqs: [],
    scheduledCachedReqs: {
      reqIds: [],
      resumedFromPreemption: [],
      newBlockIds: [],
      newTokenIds: [],
      numComputedTokens: [],
    },
    numScheduledTokens: {},
    totalNumScheduledTokens: 0,
    finishedReqIds: [],
    preemptedReqIds: [],
    kvConnectorMetadata: null,
    ...partial,
  };
}

/** Drives the executor directly, playing a minimal scheduler: one prefill in two chunks, then decode. */
async function generate(executor: ModelExecutor, prompt: number[], steps: number): Promise<number[]> {
  const tokens: number[] = [];
  const first = 8;
  let out = await executor.execute({
    schedulerOutput: output({
      scheduledNewReqs: [{ reqId: 'r', promptTokenIds: prompt, blockIds: [[1, 2]], numComputedTokens: 0 }],
      numScheduledTokens: { r: first },
      totalNumScheduledTokens: first,
    }),
    newRequestSampling: { r: greedy },
  });
  assert.deepEqual(out.sampledTokenIds, [[]], 'a partial prefill chunk samples nothing');
  let computed = first;
  let pending = prompt.length - first;
  for (let i = 0; i < steps; i++) {
    out = await executor.execute({
      schedulerOutput: output({
        scheduledCachedReqs: {
          reqIds: ['r'],
          resumedFromPreemption: [false],
          newBlockIds: [computed + pending > 32 && computed <= 32 ? [[3]] : null],
          newTokenIds: [[]],
          numComputedTokens: [computed],
        },
        numScheduledTokens: { r: pending },
        totalNumScheduledTokens: pending,
      }),
      newRequestSampling: {},
    });
    const sampled = out.sampledTokenIds[0] ?? [];
    assert.equal(sampled.length, 1);
    tokens.push(...sampled);
    computed += pending;
    pending = 1;
  }
  return tokens;
}

test('tp=2 worker threads produce the same greedy tokens as tp=1', async () => {
  const hfConfig = getModelPreset('tiny')!.config;
  const prompt = Array.from({ length: 20 }, (_, i) => (i * 37 + 11) % 256);
  const run = async (tp: number): Promise<number[]> => {
    const engineConfig = buildEngineConfig({
      model: 'tiny',
      tensor_parallel_size: tp,
      num_gpu_blocks: 16,
      max_model_len: 64,
    });
    const kvCacheConfig = buildKVCacheConfig({
      hfConfig,
      blockSize: 16,
      numBlocks: 16,
      tensorParallelSize: tp,
      maxModelLen: 64,
    });
    let executor: ModelExecutor;
    if (tp === 1) {
      const rank = await setUpRank(engineConfig, kvCacheConfig, 0, 1);
      executor = new LocalExecutor(rank.runner, rank.handshake, null);
    } else {
      executor = await ThreadExecutor.start(engineConfig, kvCacheConfig, null);
    }
    try {
      return await generate(executor, prompt, 16);
    } finally {
      await executor.shutdown();
    }
  };
  const single = await run(1);
  const double = await run(2);
  assert.equal(single.length, 16);
  assert.deepEqual(double, single);
  assert.ok(new Set(single).size > 1, 'the model produces varied tokens');
});
