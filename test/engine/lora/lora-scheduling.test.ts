/**
 * The scheduler with LoRA adapters, under emulation without weights (`--mode random`: the
 * adapters are names only): at most max_loras distinct adapters run at once (requests of
 * others wait, base-model requests never do), the running and waiting adapters reach the
 * iteration stats, and the adapter's name is an extra key of every block hash, so equal
 * prompts of different adapters share no block.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildEmulationConfig } from '../../../src/config/emulation-config.ts';
import { buildEngineConfig } from '../../../src/config/engine-config.ts';
import { Engine } from '../../../src/engine/engine.ts';
import type { IterationStats } from '../../../src/engine/iteration-stats.ts';
import type { LoRARequest } from '../../../src/engine/lora/lora-request.ts';
import { samplingParams } from '../../../src/engine/sampling-params.ts';
import { BlockHasher } from '../../../src/kv/block-hasher.ts';

const A: LoRARequest = { loraName: 'a', loraIntId: 1, loraPath: '/not/read/in/emulation' };
const B: LoRARequest = { loraName: 'b', loraIntId: 2, loraPath: '/not/read/in/emulation' };
const PROMPT = Array.from({ length: 40 }, (_, i) => 10 + i);

async function engineWith(maxLoras: number): Promise<Engine> {
  const config = buildEngineConfig({
    model: 'tiny',
    num_gpu_blocks: 64,
    max_model_len: 256,
    enable_lora: true,
    max_loras: maxLoras,
  });
  config.emulation = buildEmulationConfig({ mode: 'random' }, config.model.seed);
  return Engine.create(config);
}

test('max_loras 1: the second adapter waits while the first runs; base requests are not held back', async () => {
  const engine = await engineWith(1);
  try {
    const iterations: NonNullable<IterationStats['loraAdapters']>[] = [];
    engine.onIterationStats((s) => {
      if (s.loraAdapters) iterations.push(s.loraAdapters);
    });
    const add = (id: string, lora: LoRARequest | null) =>
      engine.addRequest({
        requestId: id,
        promptTokenIds: PROMPT,
        sampling: samplingParams({ maxTokens: 4, ignoreEos: true }),
        loraRequest: lora,
      });
    const reqs = { a1: add('a1', A), b1: add('b1', B), a2: add('a2', A), n1: add('n1', null) };
    await engine.step();
    assert.deepEqual(
      Object.entries(reqs).map(([id, r]) => [id, r.status]),
      [
        ['a1', 'RUNNING'],
        ['b1', 'WAITING'],
        ['a2', 'RUNNING'],
        ['n1', 'RUNNING'],
      ],
    );
    assert.deepEqual(engine.scheduler.loraAdapters(), {
      runningLoraAdapters: ['a'],
      waitingLoraAdapters: ['b'],
    });
    assert.equal(engine.scheduler.stats().numWaitingForLora, 1, 'b is deferred by the LoRA budget');
    let ranB = false;
    while (engine.hasWork()) {
      await engine.step();
      const running = engine.scheduler.loraAdapters().runningLoraAdapters;
      assert.ok(running.length <= 1, `at most one adapter at a time: ${running}`);
      if (running.includes('b')) ranB = true;
    }
    assert.ok(ranB, 'b ran once a was done');
    assert.deepEqual(iterations[0], { running: ['a'], waiting: ['b'] });
    assert.deepEqual(iterations.at(-1), { running: [], waiting: [] });
    assert.ok(iterations.some((i) => i.running[0] === 'b' && i.waiting.length === 0));
  } finally {
    await engine.shutdown();
  }
});

test('max_loras 2: both adapters run together', async () => {
  const engine = await engineWith(2);
  try {
    for (const [id, lora] of [
      ['a1', A],
      ['b1', B],
    ] as const)
      engine.addRequest({
        requestId: id,
        promptTokenIds: PROMPT,
        sampling: samplingParams({ maxTokens: 2, ignoreEos: true }),
        loraRequest: lora,
      });
    await engine.step();
    assert.deepEqual(engine.scheduler.loraAdapters(), {
      runningLoraAdapters: ['a', 'b'],
      waitingLoraAdapters: [],
    });
    while (engine.hasWork()) await engine.step();
  } finally {
    await engine.shutdown();
  }
});

test("the adapter's name is an extra key of every block hash: equal prompts of different adapters share no block", async () => {
  const engine = await engineWith(2);
  try {
    const hashes = (id: string, lora: LoRARequest | null) =>
      engine.addRequest({
        requestId: id,
        promptTokenIds: PROMPT,
        sampling: samplingParams({ maxTokens: 1 }),
        loraRequest: lora,
      }).blockHashes;
    const [a1, a2, b, base] = [hashes('a1', A), hashes('a2', A), hashes('b', B), hashes('n', null)];
    assert.equal(a1.length, 2);
    assert.deepEqual(a1, a2);
    const hasher = new BlockHasher(16);
    assert.deepEqual(base, hasher.hashTokens(PROMPT));
    assert.deepEqual(a1, hasher.newHashes({ allTokenIds: PROMPT, blockHashes: [], loraName: 'a' }));
    const all = [a1, b, base].flat().map(String);
    assert.equal(new Set(all).size, 6, 'no block hash is shared across adapters or with the base model');
    while (engine.hasWork()) await engine.step();
  } finally {
    await engine.shutdown();
  }
});
