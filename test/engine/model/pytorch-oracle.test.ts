/**
 * kvconnect's engine against an independent float32 PyTorch implementation of HF
 * transformers' llama / mistral / qwen2 (scripts/train/llama_ref.py): small random
 * checkpoints in many configurations, loaded from disk by the real loader (sharding,
 * F32/F16/BF16, tied heads, biases, RoPE scaling, sliding windows). Logits must agree
 * within MAX_ABS_ERROR at every prompt position, fed whole or in chunks through the paged
 * KV cache, and greedy generation through the whole engine must give the same tokens.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { DEFAULT_MODEL } from '../../../src/config/model-presets.ts';
import { LLM } from '../../../src/engine/llm.ts';
import { loadModel, loadModelConfig } from '../../../src/engine/model/load.ts';
import { compareRows, FIXTURES, readReference, rowsByChunks, rowsOfPrefixes } from './helpers/oracle.ts';

/**
 * Float32 results computed in a different order (the engine's tiled SIMD matmuls and
 * per-row loops vs PyTorch's BLAS) differ by rounding only: ~1e-6 of the logits' scale.
 * The bound leaves two orders of magnitude for that and still catches any real error
 * (a wrong RoPE frequency, mask or bias moves logits by 1e-2 or more).
 */
export const MAX_ABS_ERROR = 2e-4;
const CHUNKS = [5, 1, 1, 3, 7, 2, 16];

/** Random checkpoints (model = the fixture directory) and the trained default model. */
const cases = [
  ...readdirSync(join(FIXTURES, 'hf'))
    .sort()
    .map((name) => ({ name, model: join(FIXTURES, 'hf', name), reference: join(FIXTURES, 'hf', name) })),
  { name: DEFAULT_MODEL, model: DEFAULT_MODEL, reference: join(FIXTURES, 'kjv-llama') },
];

describe('PyTorch oracle: random HF checkpoints', () => {
  test('the fixtures cover every configuration the issue names', () => {
    assert.ok(cases.length >= 9, cases.map((c) => c.name).join(', '));
  });
  test('the comparison is not blind: the llama3 checkpoint without its rope_scaling misses by far', async () => {
    const src = join(FIXTURES, 'hf', 'llama3-rope-scaling');
    const dir = mkdtempSync(join(tmpdir(), 'kvconnect-oracle-'));
    try {
      cpSync(src, dir, { recursive: true });
      const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
      config.rope_scaling = null;
      writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
      const ref = readReference(dir);
      const prompt = ref.prompts[1] as number[];
      const rows = await rowsByChunks(loadModel(dir), loadModelConfig(dir), prompt, CHUNKS);
      assert.ok(
        compareRows(rows, ref.logits[1] as Float32Array, config.vocab_size).maxErr > 100 * MAX_ABS_ERROR,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  for (const { name, model: modelName, reference } of cases) {
    test(`${name}: logits of every position match PyTorch, whole and chunked`, async () => {
      const ref = readReference(reference);
      const config = loadModelConfig(modelName);
      const model = loadModel(modelName);
      for (const [i, prompt] of ref.prompts.entries()) {
        const expected = ref.logits[i] as Float32Array;
        const whole = compareRows(await rowsOfPrefixes(model, config, prompt), expected, config.vocab_size);
        const chunked = compareRows(
          await rowsByChunks(model, config, prompt, CHUNKS),
          expected,
          config.vocab_size,
        );
        assert.ok(whole.maxLogit > 1, 'the logits are not degenerate');
        assert.ok(whole.maxErr < MAX_ABS_ERROR, `prompt ${i}, every prefix: max abs error ${whole.maxErr}`);
        assert.ok(chunked.maxErr < MAX_ABS_ERROR, `prompt ${i}, chunked: max abs error ${chunked.maxErr}`);
      }
    });
    test(`${name}: greedy tokens through the engine equal PyTorch's`, async () => {
      const ref = readReference(reference);
      // Logits within MAX_ABS_ERROR cannot swap two tokens this far apart: equal tokens are required.
      assert.ok(ref.min_greedy_margin > 10 * MAX_ABS_ERROR, `margin ${ref.min_greedy_margin}`);
      const llm = await LLM.create({
        model: modelName,
        num_gpu_blocks: 64,
        max_model_len: 256,
        block_size: 16,
      });
      try {
        const out = await llm.generate(
          ref.prompts.map((promptTokenIds) => ({ promptTokenIds })),
          { maxTokens: ref.greedy[0]?.length ?? 0, temperature: 0, ignoreEos: true },
        );
        assert.deepEqual(
          out.map((o) => o.tokenIds),
          ref.greedy,
        );
      } finally {
        await llm.shutdown();
      }
    });
  }
});
