/**
 * The GGUF converter: the rotary permutation is the one that turns HF's half-split RoPE into
 * llama.cpp's pairwise RoPE; a converted kjv-llama reads back (header, metadata, tensor
 * layout and values) through our reader and through node-llama-cpp's independent one; the
 * byte vocabulary and refusals of what it cannot convert.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { readGgufFileInfo } from 'node-llama-cpp';
import {
  convertCheckpoint,
  convertibleDims,
  llamaTensors,
  permuteRopeRows,
} from '../../../scripts/gguf/convert.ts';
import {
  GgmlType,
  type GgufHeader,
  readGgufHeader,
  readGgufTensor,
} from '../../../scripts/gguf/gguf-file.ts';
import { byteLevelAlphabet, byteVocabularyBlock, TOKEN_TYPE } from '../../../scripts/gguf/tokenizer-block.ts';
import type { HFModelConfig } from '../../../src/config/model-presets.ts';
import { loadModelTensors } from '../../../src/engine/model/load.ts';
import { f16BitsToF32, f32ToF16Bits } from '../../../src/kv/dtype.ts';
import { mulberry32 } from '../../../src/util/mulberry32.ts';

const KJV = fileURLToPath(new URL('../../../models/kjv-llama', import.meta.url));

/** HF Llama's RoPE on one head: dimension i turns with i + d/2. */
function ropeHalves(x: Float64Array, pos: number, base: number): Float64Array {
  const d = x.length;
  const out = new Float64Array(d);
  for (let i = 0; i < d / 2; i++) {
    const a = pos * base ** ((-2 * i) / d);
    out[i] = x[i]! * Math.cos(a) - x[i + d / 2]! * Math.sin(a);
    out[i + d / 2] = x[i + d / 2]! * Math.cos(a) + x[i]! * Math.sin(a);
  }
  return out;
}

/** llama.cpp's RoPE of the `llama` architecture on one head: dimension 2i turns with 2i + 1. */
function ropePairs(x: Float64Array, pos: number, base: number): Float64Array {
  const d = x.length;
  const out = new Float64Array(d);
  for (let i = 0; i < d / 2; i++) {
    const a = pos * base ** ((-2 * i) / d);
    out[2 * i] = x[2 * i]! * Math.cos(a) - x[2 * i + 1]! * Math.sin(a);
    out[2 * i + 1] = x[2 * i + 1]! * Math.cos(a) + x[2 * i]! * Math.sin(a);
  }
  return out;
}

describe('permuteRopeRows', () => {
  test('reorders each head from [first half, second half] to interleaved pairs', () => {
    const rows = Float32Array.from([0, 1, 2, 3, 4, 5, 6, 7]);
    assert.deepEqual([...permuteRopeRows(rows, 2, 4, 1)], [0, 2, 1, 3, 4, 6, 5, 7]);
    const twoCols = Float32Array.from([0, 10, 1, 11, 2, 12, 3, 13]);
    assert.deepEqual([...permuteRopeRows(twoCols, 1, 4, 2)], [0, 10, 2, 12, 1, 11, 3, 13]);
  });

  test('pairwise RoPE of the permuted projection = the permuted half-split RoPE of the original', () => {
    const d = 8;
    const next = mulberry32(7);
    const q = Float64Array.from({ length: d }, () => next() * 2 - 1);
    const permuted = Float64Array.from(permuteRopeRows(Float32Array.from(q), 1, d, 1));
    for (const pos of [0, 1, 5, 37]) {
      const viaHf = Float64Array.from(permuteRopeRows(Float32Array.from(ropeHalves(q, pos, 10000)), 1, d, 1));
      const viaCpp = ropePairs(permuted, pos, 10000);
      for (let i = 0; i < d; i++) assert.ok(Math.abs(viaHf[i]! - viaCpp[i]!) < 1e-6, `pos ${pos} dim ${i}`);
    }
  });

  test('refuses a size that is not heads × head_dim × cols', () => {
    assert.throws(() => permuteRopeRows(new Float32Array(10), 2, 4, 1), /cannot permute 10 values/);
  });
});

describe('kjv-llama → GGUF', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvconnect-gguf-'));
  const f32 = join(dir, 'kjv-f32.gguf');
  const f16 = join(dir, 'kjv-f16.gguf');
  const { config, tensors } = loadModelTensors(KJV);
  let h32: GgufHeader;
  let h16: GgufHeader;
  before(() => {
    convertCheckpoint(KJV, [
      { file: f32, dtype: 'f32' },
      { file: f16, dtype: 'f16' },
    ]);
    h32 = readGgufHeader(f32);
    h16 = readGgufHeader(f16);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('the header holds the llama.* hyper-parameters of config.json', () => {
    const m = h32.metadata;
    assert.equal(h32.version, 3);
    assert.equal(m.get('general.architecture'), 'llama');
    assert.equal(m.get('general.file_type'), 0);
    assert.equal(h16.metadata.get('general.file_type'), 1);
    assert.equal(m.get('llama.block_count'), config.num_hidden_layers);
    assert.equal(m.get('llama.embedding_length'), config.hidden_size);
    assert.equal(m.get('llama.feed_forward_length'), config.intermediate_size);
    assert.equal(m.get('llama.attention.head_count'), config.num_attention_heads);
    assert.equal(m.get('llama.attention.head_count_kv'), config.num_key_value_heads);
    assert.equal(m.get('llama.rope.dimension_count'), config.head_dim);
    assert.equal(m.get('llama.context_length'), config.max_position_embeddings);
    assert.equal(m.get('llama.rope.freq_base'), config.rope_theta);
    assert.equal(m.get('llama.attention.layer_norm_rms_epsilon'), Math.fround(config.rms_norm_eps));
    assert.equal(m.get('llama.vocab_size'), config.vocab_size);
  });

  test('the tokenizer block is the byte-level BPE of tokenizer.json', () => {
    const tok = JSON.parse(readFileSync(join(KJV, 'tokenizer.json'), 'utf8')) as {
      model: { vocab: Record<string, number>; merges: string[] };
    };
    const m = h32.metadata;
    assert.equal(m.get('tokenizer.ggml.model'), 'gpt2');
    assert.equal(m.get('tokenizer.ggml.pre'), 'gpt-2');
    const tokens = m.get('tokenizer.ggml.tokens') as string[];
    assert.equal(tokens.length, config.vocab_size);
    for (const [text, id] of Object.entries(tok.model.vocab)) assert.equal(tokens[id], text);
    assert.deepEqual(m.get('tokenizer.ggml.merges'), tok.model.merges);
    const types = m.get('tokenizer.ggml.token_type') as number[];
    assert.equal(types[2046], TOKEN_TYPE.CONTROL);
    assert.equal(types[2047], TOKEN_TYPE.CONTROL);
    assert.equal(types.filter((t) => t === TOKEN_TYPE.NORMAL).length, config.vocab_size - 2);
    assert.equal(m.get('tokenizer.ggml.bos_token_id'), 2046);
    assert.equal(m.get('tokenizer.ggml.eos_token_id'), 2047);
    assert.equal(m.get('tokenizer.ggml.add_bos_token'), true);
  });

  test('tensors: llama.cpp names, dims innermost first, aligned and non-overlapping', () => {
    const dims = convertibleDims(config);
    const expected = llamaTensors(dims, tensors, 'f32').map((t) => t.name);
    assert.deepEqual(
      h32.tensors.map((t) => t.name),
      expected,
    );
    assert.equal(expected.length, 2 + 9 * config.num_hidden_layers, 'tied embeddings: no output.weight');
    assert.ok(expected.includes('blk.3.ffn_down.weight') && !expected.includes('output.weight'));
    const q = h32.tensors.find((t) => t.name === 'blk.0.attn_q.weight')!;
    assert.deepEqual(q.dims, [config.hidden_size, config.num_attention_heads * config.head_dim!]);
    for (const h of [h32, h16]) {
      assert.equal(h.dataOffset % 32, 0);
      let end = 0;
      for (const t of h.tensors) {
        assert.equal(t.offset % 32, 0, `${t.name} is aligned`);
        assert.ok(t.offset >= end, `${t.name} does not overlap the tensor before it`);
        end = t.offset + t.dims.reduce((a, b) => a * b, 1) * (t.type === GgmlType.F32 ? 4 : 2);
      }
    }
    for (const t of h16.tensors)
      assert.equal(t.type, t.dims.length === 1 ? GgmlType.F32 : GgmlType.F16, t.name);
  });

  test('tensor values: copied exactly (F32), Q/K permuted, F16 rounded to nearest', () => {
    const hf = (n: string) => tensors.get(n)!.data;
    assert.deepEqual(readGgufTensor(f32, h32, 'token_embd.weight'), hf('model.embed_tokens.weight'));
    assert.deepEqual(
      readGgufTensor(f32, h32, 'blk.2.ffn_down.weight'),
      hf('model.layers.2.mlp.down_proj.weight'),
    );
    assert.deepEqual(readGgufTensor(f32, h32, 'output_norm.weight'), hf('model.norm.weight'));
    const hd = config.head_dim!;
    assert.deepEqual(
      readGgufTensor(f32, h32, 'blk.1.attn_q.weight'),
      permuteRopeRows(
        hf('model.layers.1.self_attn.q_proj.weight'),
        config.num_attention_heads,
        hd,
        config.hidden_size,
      ),
    );
    assert.deepEqual(
      readGgufTensor(f32, h32, 'blk.1.attn_k.weight'),
      permuteRopeRows(
        hf('model.layers.1.self_attn.k_proj.weight'),
        config.num_key_value_heads,
        hd,
        config.hidden_size,
      ),
    );
    const up = hf('model.layers.0.mlp.up_proj.weight');
    const rounded = Float32Array.from(up, (v) => f16BitsToF32(f32ToF16Bits(v)));
    assert.deepEqual(readGgufTensor(f16, h16, 'blk.0.ffn_up.weight'), rounded);
    assert.deepEqual(
      readGgufTensor(f16, h16, 'blk.0.ffn_norm.weight'),
      hf('model.layers.0.post_attention_layernorm.weight'),
    );
  });

  test("node-llama-cpp's GGUF reader reads the same header", async () => {
    const info = await readGgufFileInfo(f16, { logWarnings: false });
    assert.equal(info.version, 3);
    assert.equal(info.metadata.general.architecture, 'llama');
    const llama = info.architectureMetadata as Record<string, unknown> & {
      attention: Record<string, unknown>;
      rope: Record<string, unknown>;
    };
    assert.equal(llama.block_count, config.num_hidden_layers);
    assert.equal(llama.embedding_length, config.hidden_size);
    assert.equal(llama.attention.head_count_kv, config.num_key_value_heads);
    assert.equal(llama.rope.freq_base, config.rope_theta);
    assert.equal(info.metadata.tokenizer.ggml.tokens.length, config.vocab_size);
    assert.deepEqual(
      info.tensorInfo!.map((t) => [t.name, t.dimensions.map(Number), t.ggmlType, Number(t.offset)]),
      h16.tensors.map((t) => [t.name, t.dims, t.type, t.offset]),
    );
  });
});

describe('what the converter refuses or fills in', () => {
  const base = JSON.parse(readFileSync(join(KJV, 'config.json'), 'utf8')) as HFModelConfig;

  test('another architecture, RoPE scaling or a sliding window is refused naming the field', () => {
    assert.throws(() => convertibleDims({ ...base, model_type: 'qwen2' }), /model_type is "qwen2"/);
    assert.throws(
      () =>
        convertibleDims({
          ...base,
          rope_scaling: { rope_type: 'linear', factor: 2 },
        }),
      /rope_scaling .*only unscaled RoPE/,
    );
    assert.throws(
      () =>
        convertibleDims({
          ...base,
          sliding_window: 64,
          layer_types: ['sliding_attention', 'full_attention', 'sliding_attention', 'full_attention'],
        }),
      /sliding_window is set/,
    );
  });

  test('without tokenizer.json: the 256 byte symbols, then unused ids; BOS/EOS from config.json', () => {
    const kvs = new Map(
      byteVocabularyBlock({ ...base, bos_token_id: 300, eos_token_id: 301 }, 320).map((kv) => [
        kv.key,
        kv.value,
      ]),
    );
    const tokens = kvs.get('tokenizer.ggml.tokens') as string[];
    const types = kvs.get('tokenizer.ggml.token_type') as number[];
    assert.equal(tokens.length, 320);
    assert.equal(tokens[10], 'Ċ', 'newline is byte 10');
    assert.equal(tokens[65], 'A');
    assert.equal(tokens[32], 'Ġ', 'space is byte 32');
    assert.deepEqual(tokens.slice(0, 256), byteLevelAlphabet());
    assert.equal(new Set(byteLevelAlphabet()).size, 256);
    assert.equal(types[300], TOKEN_TYPE.CONTROL);
    assert.equal(types[302], TOKEN_TYPE.UNUSED);
    assert.deepEqual(kvs.get('tokenizer.ggml.merges'), []);
    assert.equal(kvs.get('tokenizer.ggml.bos_token_id'), 300);
  });
});
