/**
 * Weights in half precision (--dtype): float16 and bfloat16 checkpoints are computed in the
 * dtype they are stored in (float32 activations and sums) and give the logits of their
 * values widened to float32; a float32 checkpoint rounded to a half type stays within the
 * documented distance of the PyTorch float32 oracle; the thread count never changes a bit.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import type { HFModelConfig } from '../../../src/config/model-presets.ts';
import { readCheckpointTensors } from '../../../src/engine/model/checkpoint.ts';
import { modelDims } from '../../../src/engine/model/dims.ts';
import type { LlamaModel } from '../../../src/engine/model/llama.ts';
import { loadModel, loadModelConfig } from '../../../src/engine/model/load.ts';
import { SeededRandom } from '../../../src/engine/model/prng.ts';
import { referenceForward } from '../../../src/engine/model/reference-model.ts';
import {
  expectedTensorShapes,
  type TensorMap,
  writeCheckpointDir,
} from '../../../src/engine/model/weights.ts';
import { BlockAllocator, makeKV, maxAbsDiff } from './helpers/model.ts';
import { compareRows, FIXTURES, readReference, rowsOfPrefixes } from './helpers/oracle.ts';

/**
 * How far a float32 checkpoint rounded to a half type may move the logits, as a fraction of
 * the largest |logit| (docs/engine.md, "Weights dtype"): rounding each weight costs 2^-11
 * (float16) or 2^-8 (bfloat16) of it, and the errors add up over the layers.
 */
/** The PyTorch oracle's bound for a checkpoint computed in its own dtype (pytorch-oracle.test.ts). */
const MAX_ABS_ERROR = 2e-4;

const ROUNDED_ERROR_OF_MAX_LOGIT = { float16: 0.005, bfloat16: 0.04 } as const;

const config: HFModelConfig = {
  architectures: ['LlamaForCausalLM'],
  model_type: 'llama',
  vocab_size: 301,
  hidden_size: 96,
  intermediate_size: 200,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 24,
  hidden_act: 'silu',
  max_position_embeddings: 256,
  rms_norm_eps: 1e-5,
  rope_theta: 10000,
  rope_scaling: null,
  tie_word_embeddings: false,
} as HFModelConfig;

function randomTensors(): TensorMap {
  const rng = new SeededRandom(5);
  const tensors: TensorMap = new Map();
  for (const [name, shape] of expectedTensorShapes(modelDims(config))) {
    const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
    const std = shape.length === 1 ? 0.05 : 1.2 / Math.sqrt(shape[1] as number);
    for (let i = 0; i < data.length; i++) data[i] = (shape.length === 1 ? 1 : 0) + std * rng.nextGaussian();
    tensors.set(name, { shape, data });
  }
  return tensors;
}

const root = mkdtempSync(join(tmpdir(), 'kvconnect-half-'));
after(() => rmSync(root, { recursive: true, force: true }));
const tensors = randomTensors();
const prompt = [3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43, 38, 32, 79, 50, 28, 84, 19];

/** Logits of the prompt's last token after a whole-prompt prefill and of 3 decode steps. */
async function logits(model: LlamaModel): Promise<Float32Array[]> {
  const kv = makeKV(config, { numBlocks: 24 });
  const tables = new BlockAllocator(kv.numBlocks, 3).tables(1, prompt.length + 3, 16);
  const out = [
    await model.forward(
      {
        tokenIds: Int32Array.from(prompt),
        sequences: [
          { start: 0, len: prompt.length, numComputedTokens: 0, blockTables: tables, computeLogits: true },
        ],
      },
      kv,
    ),
  ];
  for (let s = 0; s < 3; s++) {
    out.push(
      await model.forward(
        {
          tokenIds: Int32Array.of(7 + s),
          sequences: [
            {
              start: 0,
              len: 1,
              numComputedTokens: prompt.length + s,
              blockTables: tables,
              computeLogits: true,
            },
          ],
        },
        kv,
      ),
    );
  }
  return out;
}

const bits = (rows: Float32Array[]): Buffer => Buffer.concat(rows.map((r) => Buffer.from(r.buffer)));

describe('half-precision checkpoints', () => {
  for (const stored of ['F16', 'BF16'] as const) {
    test(`${stored}: loaded in its dtype at half the size, with the logits of its values widened`, async () => {
      const dir = join(root, stored);
      rmSync(dir, { recursive: true, force: true });
      mkdirSync(dir);
      writeCheckpointDir(dir, config, tensors, stored);
      const half = loadModel(dir);
      assert.equal(half.dtype, stored === 'F16' ? 'float16' : 'bfloat16');
      const wide = loadModel(dir, { dtype: 'float32' });
      assert.equal(wide.dtype, 'float32');
      assert.ok(
        half.weightBytes < 0.52 * wide.weightBytes,
        `resident weights ${half.weightBytes} B vs ${wide.weightBytes} B in float32`,
      );
      // The same values computed from 2-byte weights give the same bits as from widened ones.
      assert.ok(bits(await logits(half)).equals(bits(await logits(wide))));
      // And they are the model: the plain reference forward over the widened checkpoint agrees.
      const ref = referenceForward(config, readCheckpointTensors(dir, modelDims(config)), prompt);
      const first = (await logits(half))[0] as Float32Array;
      assert.ok(maxAbsDiff(first, ref, (prompt.length - 1) * config.vocab_size) < MAX_ABS_ERROR);
    });
  }
});

describe('a float32 checkpoint rounded by --dtype', () => {
  const dir = join(FIXTURES, 'hf', 'llama-gqa3-untied-f32');
  for (const dtype of ['float16', 'bfloat16'] as const) {
    test(`${dtype}: within ${ROUNDED_ERROR_OF_MAX_LOGIT[dtype] * 100}% of the largest logit of PyTorch's float32 logits`, async () => {
      const ref = readReference(dir);
      const fixtureConfig = loadModelConfig(dir);
      const model = loadModel(dir, { dtype });
      assert.equal(model.dtype, dtype);
      let maxErr = 0;
      let maxLogit = 0;
      for (const [i, p] of ref.prompts.entries()) {
        const r = compareRows(
          await rowsOfPrefixes(model, fixtureConfig, p),
          ref.logits[i] as Float32Array,
          fixtureConfig.vocab_size,
        );
        maxErr = Math.max(maxErr, r.maxErr);
        maxLogit = Math.max(maxLogit, r.maxLogit);
      }
      // Not blind: rounding moved the logits far past float32's own error ...
      assert.ok(maxErr > 10 * MAX_ABS_ERROR, `max abs error ${maxErr}`);
      // ... and no further than the documented bound.
      assert.ok(
        maxErr < ROUNDED_ERROR_OF_MAX_LOGIT[dtype] * maxLogit,
        `max abs error ${maxErr} of ${maxLogit}`,
      );
    });
  }
});

test('the logits do not depend on the thread count (1, 2 and 3 threads, bit for bit)', async () => {
  const dir = join(root, 'threads');
  mkdirSync(dir);
  writeCheckpointDir(dir, config, tensors, 'BF16');
  const runs: Buffer[] = [];
  for (const threads of [1, 2, 3]) {
    for (const dtype of ['auto', 'float32'] as const)
      runs.push(bits(await logits(loadModel(dir, { dtype, threads }))));
  }
  for (const run of runs) assert.ok(run.equals(runs[0] as Buffer));
});
