/**
 * What a HF checkpoint directory may contain, and the errors for what kvconnect cannot run:
 * every problem names the config field or tensor, what was expected and what was found.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { buildEngineConfig } from '../../../src/config/engine-config.ts';
import { resolveModelInfo } from '../../../src/config/model-info.ts';
import { loadModel, loadModelConfig } from '../../../src/engine/model/load.ts';
import { ropeInvFreq } from '../../../src/engine/model/rope.ts';
import {
  readSafetensorsFile,
  tensorToFloat32,
  writeSafetensorsFile,
} from '../../../src/engine/model/safetensors.ts';
import { KVError } from '../../../src/errors/index.ts';
import { FIXTURES } from './helpers/oracle.ts';

const root = mkdtempSync(join(tmpdir(), 'kvconnect-fidelity-'));
after(() => rmSync(root, { recursive: true, force: true }));

type Json = Record<string, unknown>;

/** A copy of a fixture checkpoint with its config.json edited. */
function copyOf(name: string, edit: (config: Json) => void = () => {}): string {
  const dir = mkdtempSync(join(root, `${name}-`));
  cpSync(join(FIXTURES, 'hf', name), dir, { recursive: true });
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Json;
  edit(config);
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
  return dir;
}

/** Rewrites model.safetensors with `edit` applied to its float32 tensors. */
function editTensors(
  dir: string,
  edit: (t: Map<string, { shape: number[]; data: Float32Array }>) => void,
): void {
  const file = join(dir, 'model.safetensors');
  const t = new Map(
    [...readSafetensorsFile(file)].map(([n, v]) => [n, { shape: [...v.shape], data: tensorToFloat32(v) }]),
  );
  edit(t);
  writeSafetensorsFile(file, new Map([...t].map(([n, v]) => [n, { dtype: 'F32' as const, ...v }])));
}

function rejects(fn: () => unknown, code: string, field: string | null, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof KVError, String(e));
    assert.equal(e.code, code, e.message);
    if (field !== null) assert.equal(e.field, field, e.message);
    assert.match(e.message, pattern);
    assert.ok((e.hint ?? '').length > 10, 'says how to fix it');
    return true;
  });
}

test('model_type must be llama, mistral or qwen2; the error names the field and what was found', () => {
  const dir = copyOf('llama-gqa3-untied-f32', (c) => (c.model_type = 'gpt2'));
  rejects(
    () => loadModel(dir),
    'MODEL_UNSUPPORTED',
    'model.model_type',
    /model_type is "gpt2", expected one of "llama", "mistral", "qwen2"/,
  );
  rejects(() => resolveModelInfo(dir), 'MODEL_UNSUPPORTED', 'model.model_type', /gpt2/);
  const missing = copyOf('llama-gqa3-untied-f32', (c) => delete c.model_type);
  rejects(() => loadModel(missing), 'MODEL_UNSUPPORTED', 'model.model_type', /model_type is nothing/);
});

test('rope_scaling: llama3 and linear run, other types and incomplete llama3 parameters are refused', () => {
  rejects(
    () => loadModel(copyOf('llama-linear-rope', (c) => (c.rope_scaling = { rope_type: 'yarn', factor: 4 }))),
    'MODEL_UNSUPPORTED',
    'model.rope_scaling.rope_type',
    /"yarn", expected one of "default", "linear", "llama3"/,
  );
  rejects(
    () => loadModel(copyOf('llama-linear-rope', (c) => (c.rope_scaling = { type: 'dynamic', factor: 2 }))),
    'MODEL_UNSUPPORTED',
    'model.rope_scaling.type',
    /"dynamic"/,
  );
  rejects(
    () => loadModel(copyOf('llama3-rope-scaling', (c) => delete (c.rope_scaling as Json).low_freq_factor)),
    'KV_MODEL_CONFIG_INVALID',
    'model.rope_scaling.low_freq_factor',
    /low_freq_factor is nothing, expected a positive number/,
  );
});

test('activations, biases and quantization the decoder does not implement are refused by field', () => {
  const cases: Array<[(c: Json) => void, string]> = [
    [(c) => (c.hidden_act = 'gelu'), 'hidden_act'],
    [(c) => (c.attention_bias = true), 'attention_bias'],
    [(c) => (c.mlp_bias = true), 'mlp_bias'],
    [(c) => (c.quantization_config = { quant_method: 'awq' }), 'quantization_config'],
    [(c) => (c.partial_rotary_factor = 0.5), 'partial_rotary_factor'],
  ];
  for (const [edit, field] of cases) {
    rejects(
      () => loadModel(copyOf('llama-gqa3-untied-f32', edit)),
      'MODEL_UNSUPPORTED',
      `model.${field}`,
      new RegExp(field),
    );
  }
});

test('every tensor in the files is used: a qwen2 checkpoint declared as llama fails naming a bias', () => {
  const dir = copyOf('qwen2-mqa-bias-bf16', (c) => (c.model_type = 'llama'));
  rejects(
    () => loadModel(dir),
    'MODEL_WEIGHTS_UNUSED',
    null,
    /'model\.layers\.0\.self_attn\.[qkv]_proj\.bias'/,
  );
  const extra = copyOf('llama-gqa3-untied-f32');
  editTensors(extra, (t) =>
    t.set('model.layers.1.self_attn.o_proj.bias', { shape: [64], data: new Float32Array(64) }),
  );
  rejects(
    () => loadModel(extra),
    'MODEL_WEIGHTS_UNUSED',
    null,
    /'model\.layers\.1\.self_attn\.o_proj\.bias'/,
  );
});

test('tied heads: a redundant lm_head.weight must equal the embedding; inv_freq buffers must match the config', () => {
  const tied = copyOf('llama-gqa3-untied-f32', (c) => (c.tie_word_embeddings = true));
  rejects(
    () => loadModel(tied),
    'MODEL_WEIGHTS_UNUSED',
    'model.tie_word_embeddings',
    /differs from model\.embed_tokens\.weight/,
  );
  editTensors(tied, (t) => {
    const embed = t.get('model.embed_tokens.weight')!;
    t.set('lm_head.weight', { shape: embed.shape, data: embed.data.slice() });
  });
  assert.equal(loadModel(tied).dims.tieWordEmbeddings, true);

  const rope = copyOf('llama-gqa3-untied-f32');
  const inv = ropeInvFreq(16, 10000, { ropeType: 'default' });
  editTensors(rope, (t) => t.set('model.layers.0.self_attn.rotary_emb.inv_freq', { shape: [8], data: inv }));
  assert.equal(loadModel(rope).dims.headDim, 16);
  editTensors(rope, (t) =>
    t.set('model.layers.1.self_attn.rotary_emb.inv_freq', { shape: [8], data: inv.map((v) => v / 2) }),
  );
  rejects(() => loadModel(rope), 'MODEL_WEIGHTS_UNUSED', null, /rotary_emb\.inv_freq.*rope_theta 10000/);
});

test('sharded checkpoints: a missing shard file and a tensor not in its listed shard are named', () => {
  const dir = copyOf('llama-sharded-bf16');
  assert.equal(loadModel(dir).dims.numLayers, 3);
  unlinkSync(join(dir, 'model-00002-of-00003.safetensors'));
  rejects(() => loadModel(dir), 'MODEL_FILE_NOT_FOUND', null, /model-00002-of-00003\.safetensors/);
  const moved = copyOf('llama-sharded-bf16');
  const indexFile = join(moved, 'model.safetensors.index.json');
  const index = JSON.parse(readFileSync(indexFile, 'utf8')) as { weight_map: Record<string, string> };
  const [name, shard] = Object.entries(index.weight_map).find(([, f]) => f.includes('00001'))!;
  index.weight_map[name] = shard.replace('00001', '00003');
  writeFileSync(indexFile, JSON.stringify(index));
  rejects(
    () => loadModel(moved),
    'MODEL_WEIGHTS_MISSING',
    null,
    new RegExp(`'${name.replaceAll('.', '\\.')}'.*00003`),
  );
});

test('weights in another format are pointed out; no weights at all says what to add', () => {
  const dir = copyOf('llama-gqa3-untied-f32');
  unlinkSync(join(dir, 'model.safetensors'));
  rejects(() => loadModel(dir), 'MODEL_FILE_NOT_FOUND', null, /No model\.safetensors/);
  writeFileSync(join(dir, 'pytorch_model.bin'), 'not read');
  assert.throws(
    () => loadModel(dir),
    (e: unknown) => e instanceof KVError && /pytorch_model\.bin/.test(e.hint ?? ''),
  );
});

test('mistral and qwen2 sliding-window rules become layer_types; max_position_embeddings bounds max_model_len', () => {
  assert.deepEqual(loadModelConfig(join(FIXTURES, 'hf', 'mistral-sliding')).layer_types, [
    'sliding_attention',
    'sliding_attention',
  ]);
  const hybrid = resolveModelInfo(join(FIXTURES, 'hf', 'qwen2-hybrid-sliding'));
  assert.deepEqual(hybrid.hfConfig.layer_types, ['full_attention', 'sliding_attention', 'sliding_attention']);
  assert.equal(hybrid.isHybrid, true);
  const qwen = resolveModelInfo(join(FIXTURES, 'hf', 'qwen2-mqa-bias-bf16'));
  assert.equal(qwen.isHybrid, false, 'use_sliding_window false: every layer is full attention');

  const llama3 = join(FIXTURES, 'hf', 'llama3-rope-scaling');
  assert.equal(buildEngineConfig({ model: llama3 }).model.maxModelLen, 512);
  const linear = join(FIXTURES, 'hf', 'llama-linear-rope');
  assert.equal(buildEngineConfig({ model: linear }).model.maxModelLen, 1024, 'linear scaling stretches it');
  assert.equal(buildEngineConfig({ model: llama3, max_model_len: 100 }).model.maxModelLen, 100);
  rejects(
    () => buildEngineConfig({ model: llama3, max_model_len: 513 }),
    'KV_CONFIG_INVALID',
    'max_model_len',
    /^User-specified max_model_len \(513\) is greater than the derived max_model_len \(max_position_embeddings=512/,
  );
});
