import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { RequestOutputDelta } from '../../src/engine/api.ts';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { samplingParams } from '../../src/engine/llm.ts';

const FIXTURE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures', 'recording-connector.ts');

async function collect(stream: AsyncIterable<RequestOutputDelta>): Promise<RequestOutputDelta[]> {
  const out: RequestOutputDelta[] = [];
  for await (const d of stream) out.push(d);
  return out;
}

test('concurrent streams each get their own tokens, one delta per step, with metrics', async () => {
  const engine = await AsyncEngine.create({ model: 'tiny', num_gpu_blocks: 64, max_model_len: 128 });
  try {
    const prompts = ['alpha beta gamma', 'one two three four five', 'x'];
    const sampling = samplingParams({ maxTokens: 5, temperature: 0, ignoreEos: true });
    const alone: number[][] = [];
    for (const [i, prompt] of prompts.entries()) {
      const deltas = await collect(engine.generate({ requestId: `alone-${i}`, prompt, sampling }));
      alone.push(deltas.flatMap((d) => d.newTokenIds));
    }
    const together = await Promise.all(
      prompts.map((prompt, i) => collect(engine.generate({ requestId: `together-${i}`, prompt, sampling }))),
    );
    together.forEach((deltas, i) => {
      assert.deepEqual(
        deltas.flatMap((d) => d.newTokenIds),
        alone[i],
      );
      assert.equal(deltas.length, 5, 'one delta per generated token');
      assert.ok(deltas.slice(0, -1).every((d) => !d.finished));
      const last = deltas.at(-1);
      assert.equal(last?.finishReason, 'length');
      assert.equal(last?.metrics.numPromptTokens, engine.tokenizer.encode(prompts[i] as string).length);
      assert.ok((last?.metrics.ttftMs ?? -1) >= 0);
      assert.ok((last?.metrics.e2eMs ?? -1) >= (last?.metrics.ttftMs ?? 0));
      assert.equal(last?.metrics.numGeneratedTokens, 5);
    });
    const stats = engine.stats();
    assert.equal(stats.generationTokensTotal, 30);
    assert.equal(stats.numRequestsRunning + stats.numRequestsWaiting, 0);
  } finally {
    await engine.shutdown();
  }
});

test('abort mid-stream (abort(), AbortSignal, consumer break) frees the blocks', async () => {
  const engine = await AsyncEngine.create({ model: 'tiny', num_gpu_blocks: 64, max_model_len: 256 });
  try {
    const sampling = samplingParams({ maxTokens: 200, temperature: 0, ignoreEos: true });
    // 1. abort() by id
    const deltas: RequestOutputDelta[] = [];
    for await (const d of engine.generate({ requestId: 'a', prompt: 'abort me please', sampling })) {
      deltas.push(d);
      if (deltas.length === 2) {
        assert.ok(engine.stats().kvCacheUsage > 0);
        engine.abort('a');
      }
    }
    assert.equal(deltas.at(-1)?.finishReason, 'abort');
    assert.ok(deltas.length < 10);
    // 2. AbortSignal
    const controller = new AbortController();
    const viaSignal: RequestOutputDelta[] = [];
    for await (const d of engine.generate(
      { requestId: 'b', prompt: 'signal', sampling },
      controller.signal,
    )) {
      viaSignal.push(d);
      if (viaSignal.length === 3) controller.abort();
    }
    assert.equal(viaSignal.at(-1)?.finishReason, 'abort');
    // 3. The consumer stops reading (client disconnect)
    let seen = 0;
    for await (const _ of engine.generate({ requestId: 'c', prompt: 'disconnect', sampling })) {
      if (++seen === 2) break;
    }
    await engine.waitIdle();
    const stats = engine.stats();
    assert.equal(stats.kvCacheUsage, 0);
    assert.equal(stats.numRequestsRunning + stats.numRequestsWaiting, 0);
    assert.ok(stats.generationTokensTotal < 30, 'aborted requests stopped generating');
  } finally {
    await engine.shutdown();
  }
});

test('kv_transfer_params go into the request and come back on the final delta', async () => {
  const engine = await AsyncEngine.create({
    model: 'tiny',
    num_gpu_blocks: 64,
    max_model_len: 128,
    kv_transfer_config: {
      kv_connector: 'RecordingConnector',
      kv_connector_module_path: FIXTURE,
      kv_role: 'kv_both',
      engine_id: `async-${process.pid}`,
    },
  });
  try {
    const deltas = await collect(
      engine.generate({
        requestId: 'kv',
        prompt: 'hand this prefill off',
        sampling: samplingParams({ maxTokens: 1, temperature: 0 }),
        kvTransferParams: { save_key: `async-${process.pid}-key` },
      }),
    );
    assert.deepEqual(deltas.at(-1)?.kvTransferParams, {
      load_key: `async-${process.pid}-key`,
      saved_by: `async-${process.pid}`,
    });
    assert.ok(deltas.slice(0, -1).every((d) => d.kvTransferParams === null));
    await engine.waitIdle();
    assert.equal(engine.stats().kvCacheUsage, 0);
  } finally {
    await engine.shutdown();
  }
});

test('invalid requests fail at once with a KVError; a shut-down engine refuses requests', async () => {
  const engine = await AsyncEngine.create({ model: 'tiny', num_gpu_blocks: 16, max_model_len: 32 });
  const sampling = samplingParams({ maxTokens: 2 });
  assert.throws(() => engine.generate({ requestId: 'long', promptTokenIds: Array(40).fill(1), sampling }), {
    code: 'KV_REQUEST_INVALID_LENGTH',
  });
  assert.throws(() => engine.generate({ requestId: 'empty', sampling }), { code: 'KV_REQUEST_INVALID' });
  await engine.shutdown();
  assert.throws(() => engine.generate({ requestId: 'late', prompt: 'x', sampling }), {
    code: 'KV_ENGINE_CLOSED',
  });
});
