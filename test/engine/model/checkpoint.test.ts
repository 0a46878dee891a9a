import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { getModelPreset } from '../../../src/config/model-presets.ts';
import { loadModel, loadModelTensors } from '../../../src/engine/model/load.ts';
import { referenceForward } from '../../../src/engine/model/reference-model.ts';
import {
  generatePresetTensors,
  tensorsDigest,
  writeCheckpointDir,
} from '../../../src/engine/model/weights.ts';
import { KVError } from '../../../src/errors/index.ts';
import { BlockAllocator, makeKV, maxAbsDiff, textTokens } from './helpers/model.ts';

const root = mkdtempSync(join(tmpdir(), 'kvconnect-ckpt-'));
after(() => rmSync(root, { recursive: true, force: true }));

async function lastLogits(model: ReturnType<typeof loadModel>, tokens: number[]): Promise<Float32Array> {
  const kv = makeKV(
    model.dims.layerTypes.includes('sliding_attention')
      ? getModelPreset('tiny-hybrid')!.config
      : getModelPreset('tiny')!.config,
  );
  const tables = new BlockAllocator(kv.numBlocks, 1).tables(
    kv.kvCacheConfig.groups.length,
    tokens.length,
    16,
  );
  return model.forward(
    {
      tokenIds: Int32Array.from(tokens),
      sequences: [
        { start: 0, len: tokens.length, numComputedTokens: 0, blockTables: tables, computeLogits: true },
      ],
    },
    kv,
  );
}

test('the tiny preset exported as an F32 checkpoint directory loads to identical logits', async () => {
  const dir = mkdtempSync(join(root, 'tiny-'));
  const { config, tensors } = loadModelTensors('tiny');
  writeCheckpointDir(dir, config, tensors, 'F32');
  const prompt = textTokens('checkpoint round trip');
  const fromPreset = await lastLogits(loadModel('tiny'), prompt);
  const fromDir = await lastLogits(loadModel(dir), prompt);
  assert.deepEqual(fromDir, fromPreset);
});

test('an untied BF16 checkpoint loads and matches the reference forward of its weights', async () => {
  const dir = mkdtempSync(join(root, 'untied-'));
  const preset = getModelPreset('tiny')!;
  const config = { ...preset.config, tie_word_embeddings: false };
  const tensors = generatePresetTensors({ ...preset, config });
  assert.ok(tensors.has('lm_head.weight'));
  writeCheckpointDir(dir, config, tensors, 'BF16');
  const loaded = loadModelTensors(dir);
  const prompt = textTokens('bf16 weights');
  const ref = referenceForward(loaded.config, loaded.tensors, prompt);
  const logits = await lastLogits(loadModel(dir), prompt);
  assert.ok(maxAbsDiff(logits, ref, (prompt.length - 1) * config.vocab_size) < 2e-3);
  // bf16 rounding changed the weights, so the logits differ from the f32 model's.
  const exact = referenceForward(config, tensors, prompt);
  assert.ok(maxAbsDiff(logits, exact, (prompt.length - 1) * config.vocab_size) > 1e-4);
});

test('checkpoint errors: missing directory, bad config, missing tensor', () => {
  assert.throws(
    () => loadModel(join(root, 'does-not-exist')),
    (e: unknown) => e instanceof KVError && e.code === 'KV_MODEL_NOT_FOUND',
  );
  const dir = mkdtempSync(join(root, 'bad-'));
  writeFileSync(
    join(dir, 'config.json'),
    JSON.stringify({ ...loadModelTensors('tiny').config, hidden_size: 0 }),
  );
  assert.throws(
    () => loadModel(dir),
    (e: unknown) =>
      e instanceof KVError && e.code === 'KV_MODEL_CONFIG_INVALID' && e.field === 'model.hidden_size',
  );
  writeFileSync(
    join(dir, 'config.json'),
    JSON.stringify({ ...loadModelTensors('tiny').config, head_dim: 3 }),
  );
  assert.throws(
    () => loadModel(dir),
    (e: unknown) =>
      e instanceof KVError && e.code === 'KV_MODEL_CONFIG_INVALID' && e.field === 'model.head_dim',
  );
  const { config, tensors } = loadModelTensors('tiny');
  tensors.delete('model.layers.2.mlp.up_proj.weight');
  writeCheckpointDir(dir, config, tensors);
  assert.throws(
    () => loadModel(dir),
    (e: unknown) =>
      e instanceof KVError &&
      e.code === 'MODEL_WEIGHTS_MISSING' &&
      e.message.includes('model.layers.2.mlp.up_proj.weight'),
  );
});

test('preset weights are deterministic across runs and processes', () => {
  const preset = getModelPreset('tiny')!;
  const a = tensorsDigest(generatePresetTensors(preset));
  const b = tensorsDigest(generatePresetTensors(preset));
  assert.equal(a, b);
  assert.notEqual(a, tensorsDigest(generatePresetTensors({ ...preset, weightSeed: preset.weightSeed + 1 })));
  const weightsModule = fileURLToPath(new URL('../../../src/engine/model/weights.ts', import.meta.url));
  const presetsModule = fileURLToPath(new URL('../../../src/config/model-presets.ts', import.meta.url));
  const code = `
    const w = await import(${JSON.stringify(weightsModule)});
    const p = await import(${JSON.stringify(presetsModule)});
    console.log(w.tensorsDigest(w.generatePresetTensors(p.getModelPreset('tiny'))));`;
  const child = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
    encoding: 'utf8',
  }).trim();
  assert.equal(child, a);
});
