import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { LLM, type LLMOptions } from '../../src/engine/llm.ts';

const PROMPTS = [
  'The quick brown fox jumps over the lazy dog and keeps running far away.',
  'The quick brown fox jumps over the lazy dog, then sleeps.',
  'kv',
];
const GREEDY = { maxTokens: 8, temperature: 0, ignoreEos: true };

async function greedyTokens(options: LLMOptions, prompts = PROMPTS): Promise<number[][]> {
  const llm = await LLM.create({ num_gpu_blocks: 64, max_model_len: 256, ...options });
  try {
    // Twice: the second run hits the prefix cache when it is on.
    const first = await llm.generate(prompts, GREEDY);
    const second = await llm.generate(prompts, GREEDY);
    assert.deepEqual(
      second.map((o) => o.tokenIds),
      first.map((o) => o.tokenIds),
    );
    for (const o of first) {
      assert.equal(o.tokenIds.length, GREEDY.maxTokens);
      assert.equal(o.finishReason, 'length');
    }
    const stats = (await llm.engine()).stats();
    if (options.enable_prefix_caching === true)
      assert.ok(stats.prefixCacheHitsTotal > 0, 'the second run hit the prefix cache');
    if (options.enable_prefix_caching === false) assert.equal(stats.prefixCacheHitsTotal, 0);
    return first.map((o) => o.tokenIds);
  } finally {
    await llm.shutdown();
  }
}

for (const model of ['tiny', 'tiny-hybrid']) {
  test(`${model}: prefix caching and chunked prefill do not change greedy outputs`, async () => {
    const plain = await greedyTokens({ model, enable_prefix_caching: false });
    const cached = await greedyTokens({ model, enable_prefix_caching: true });
    const chunked = await greedyTokens({ model, enable_prefix_caching: true, max_num_batched_tokens: 16 });
    assert.deepEqual(cached, plain);
    assert.deepEqual(chunked, plain);
    assert.notDeepEqual(plain[0], plain[2], 'different prompts give different continuations');
  });
}

test('tp=2 (worker threads) equals tp=1, greedy, through the whole engine', async () => {
  const single = await greedyTokens({ model: 'tiny' });
  const double = await greedyTokens({ model: 'tiny', tensor_parallel_size: 2 });
  assert.deepEqual(double, single);
});

test('the same prompt gives the same tokens in another process (seeded sampling too)', async () => {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const script = path.join(here, 'fixtures', 'generate-once.ts');
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', script], {
    timeout: 60_000,
  });
  const child = JSON.parse(stdout.trim().split('\n').at(-1) as string) as number[][];
  const { generateOnce } = await import('./fixtures/generate-once.ts');
  assert.deepEqual(await generateOnce(), child);
  assert.equal(child.length, 2);
  assert.equal(child[1]?.length, 8);
});

test('text prompts are detokenized and stop strings end the request without the stop text', async () => {
  const llm = await LLM.create({ model: 'tiny', num_gpu_blocks: 32, max_model_len: 128 });
  try {
    const [free] = await llm.generate('Hello', { maxTokens: 12, temperature: 0, ignoreEos: true });
    assert.ok(free && free.text.length > 0);
    const tokenizer = (await llm.engine()).tokenizer;
    assert.equal(free.text, tokenizer.decode(free.tokenIds));
    // Use a piece of the free-running output as a stop string.
    const stop = free.text.slice(3, 5);
    const [stopped] = await llm.generate('Hello', {
      maxTokens: 12,
      temperature: 0,
      ignoreEos: true,
      stop: [stop],
    });
    assert.equal(stopped?.finishReason, 'stop');
    assert.equal(stopped?.text, free.text.slice(0, free.text.indexOf(stop)));
    const engine = await llm.engine();
    assert.equal(engine.stats().numRequestsRunning, 0);
  } finally {
    await llm.shutdown();
  }
});
