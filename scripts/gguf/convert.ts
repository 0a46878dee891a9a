/**
 * A HF Llama checkpoint directory → one GGUF file that llama.cpp loads as architecture
 * `llama`, with F32 or F16 weights (dev tooling: the llama.cpp comparison of
 * `npm run bench -- engine-vs-llamacpp` and its test).
 *
 *   node --import tsx scripts/gguf/convert.ts <checkpoint dir> <out.gguf> [--dtype f32|f16]
 *
 * What llama.cpp expects, and what this writes:
 * - tensor names: `token_embd`, `output_norm`, `output` (absent when the embeddings are tied:
 *   llama.cpp then reads `token_embd` for the LM head), and per layer `blk.N.` + `attn_norm`,
 *   `attn_q`, `attn_k`, `attn_v`, `attn_output`, `ffn_norm`, `ffn_gate`, `ffn_up`, `ffn_down`;
 * - the rotary layout: HF Llama checkpoints rotate dimension i with i + head_dim/2 (halves),
 *   llama.cpp's `llama` architecture rotates 2i with 2i + 1 (pairs), so the rows of every
 *   Q and K head are reordered from [first half, second half] to interleaved pairs;
 * - hyper-parameters as `llama.*` keys, `general.file_type` (0 all F32, 1 mostly F16), and the
 *   tokenizer block (tokenizer-block.ts);
 * - F16 files keep the 1-D norm weights in F32, as llama.cpp's own converter does.
 *
 * Only what the engine runs as a plain Llama is converted: another model type, RoPE scaling,
 * sliding windows or biases are refused with the field named.
 */
import { statSync } from 'node:fs';
import { basename, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import type { HFModelConfig } from '../../src/config/model-presets.ts';
import { type ModelDims, modelDims } from '../../src/engine/model/dims.ts';
import { loadModelTensors } from '../../src/engine/model/load.ts';
import type { Tensor, TensorMap } from '../../src/engine/model/weights.ts';
import { GgmlType, type GgufKV, type GgufTensorToWrite, GgufType, writeGguf } from './gguf-file.ts';
import { tokenizerBlock } from './tokenizer-block.ts';

export type GgufDtype = 'f32' | 'f16';

/**
 * Rows of a [heads·head_dim, in] projection, reordered per head from HF's rotary halves to
 * llama.cpp's interleaved pairs: new row 2i + j of a head is old row j·head_dim/2 + i.
 */
export function permuteRopeRows(
  data: Float32Array,
  heads: number,
  headDim: number,
  cols: number,
): Float32Array {
  if (data.length !== heads * headDim * cols) {
    throw new Error(
      `gguf: cannot permute ${data.length} values as ${heads} heads × ${headDim} rows × ${cols}`,
    );
  }
  const out = new Float32Array(data.length);
  const half = headDim / 2;
  for (let h = 0; h < heads; h++) {
    for (let i = 0; i < half; i++) {
      for (let j = 0; j < 2; j++) {
        const from = (h * headDim + j * half + i) * cols;
        const to = (h * headDim + 2 * i + j) * cols;
        out.set(data.subarray(from, from + cols), to);
      }
    }
  }
  return out;
}

function refuse(field: string, problem: string): Error {
  return new Error(
    `gguf: config.json ${field} ${problem}; the converter writes plain Llama checkpoints only`,
  );
}

/** The dims of a checkpoint the converter can write, or an error naming the field. */
export function convertibleDims(config: HFModelConfig): ModelDims {
  if (config.model_type !== 'llama')
    throw refuse('model_type', `is ${JSON.stringify(config.model_type)}, expected "llama"`);
  const dims = modelDims(config);
  if (dims.ropeScaling.ropeType !== 'default')
    throw refuse(
      'rope_scaling',
      `is ${JSON.stringify(config.rope_scaling)} (only unscaled RoPE is converted)`,
    );
  if (dims.slidingWindow !== null || dims.layerTypes.some((t) => t !== 'full_attention'))
    throw refuse('sliding_window', 'is set (only full attention is converted)');
  if (dims.qkvBias) throw refuse('model_type', 'has q/k/v biases');
  return dims;
}

/** `general.*` and `llama.*` keys for a checkpoint of these dims. */
export function llamaMetadata(
  config: HFModelConfig,
  dims: ModelDims,
  name: string,
  dtype: GgufDtype,
): GgufKV[] {
  const u32 = (key: string, value: number): GgufKV => ({ key, type: GgufType.UINT32, value });
  const f32 = (key: string, value: number): GgufKV => ({ key, type: GgufType.FLOAT32, value });
  return [
    { key: 'general.architecture', type: GgufType.STRING, value: 'llama' },
    { key: 'general.name', type: GgufType.STRING, value: name },
    u32('general.file_type', dtype === 'f32' ? 0 : 1),
    u32('llama.vocab_size', dims.vocabSize),
    u32('llama.context_length', config.max_position_embeddings ?? 2048),
    u32('llama.embedding_length', dims.hiddenSize),
    u32('llama.block_count', dims.numLayers),
    u32('llama.feed_forward_length', dims.intermediateSize),
    u32('llama.attention.head_count', dims.numHeads),
    u32('llama.attention.head_count_kv', dims.numKvHeads),
    u32('llama.attention.key_length', dims.headDim),
    u32('llama.attention.value_length', dims.headDim),
    u32('llama.rope.dimension_count', dims.headDim),
    f32('llama.attention.layer_norm_rms_epsilon', dims.rmsNormEps),
    f32('llama.rope.freq_base', dims.ropeTheta),
  ];
}

/** The HF tensors under llama.cpp's names, Q/K permuted, in llama.cpp's order. */
export function llamaTensors(dims: ModelDims, tensors: TensorMap, dtype: GgufDtype): GgufTensorToWrite[] {
  const get = (name: string): Tensor => {
    const t = tensors.get(name);
    if (!t) throw new Error(`gguf: the checkpoint has no tensor ${name}`);
    return t;
  };
  const out: GgufTensorToWrite[] = [];
  const add = (ggufName: string, t: Tensor, data = t.data) => {
    // Norm vectors stay F32 in an F16 file (llama.cpp multiplies by them in F32).
    const type = dtype === 'f16' && t.shape.length > 1 ? GgmlType.F16 : GgmlType.F32;
    out.push({ name: ggufName, shape: t.shape, type, data });
  };
  add('token_embd.weight', get('model.embed_tokens.weight'));
  for (let l = 0; l < dims.numLayers; l++) {
    const hf = `model.layers.${l}`;
    const blk = `blk.${l}`;
    const q = get(`${hf}.self_attn.q_proj.weight`);
    const k = get(`${hf}.self_attn.k_proj.weight`);
    add(`${blk}.attn_norm.weight`, get(`${hf}.input_layernorm.weight`));
    add(`${blk}.attn_q.weight`, q, permuteRopeRows(q.data, dims.numHeads, dims.headDim, dims.hiddenSize));
    add(`${blk}.attn_k.weight`, k, permuteRopeRows(k.data, dims.numKvHeads, dims.headDim, dims.hiddenSize));
    add(`${blk}.attn_v.weight`, get(`${hf}.self_attn.v_proj.weight`));
    add(`${blk}.attn_output.weight`, get(`${hf}.self_attn.o_proj.weight`));
    add(`${blk}.ffn_norm.weight`, get(`${hf}.post_attention_layernorm.weight`));
    add(`${blk}.ffn_gate.weight`, get(`${hf}.mlp.gate_proj.weight`));
    add(`${blk}.ffn_up.weight`, get(`${hf}.mlp.up_proj.weight`));
    add(`${blk}.ffn_down.weight`, get(`${hf}.mlp.down_proj.weight`));
  }
  add('output_norm.weight', get('model.norm.weight'));
  if (!dims.tieWordEmbeddings) add('output.weight', get('lm_head.weight'));
  return out;
}

/** Converts a checkpoint directory into one GGUF file per target (the weights are read once). */
export function convertCheckpoint(
  dir: string,
  targets: ReadonlyArray<{ file: string; dtype: GgufDtype }>,
): void {
  const { config, tensors } = loadModelTensors(resolve(dir));
  const dims = convertibleDims(config);
  const tokenizer = tokenizerBlock(dir, config, dims.vocabSize);
  for (const { file, dtype } of targets) {
    writeGguf(
      file,
      [...llamaMetadata(config, dims, basename(resolve(dir)), dtype), ...tokenizer],
      llamaTensors(dims, tensors, dtype),
    );
  }
}

const USAGE =
  'usage: node --import tsx scripts/gguf/convert.ts <checkpoint dir> <out.gguf> [--dtype f32|f16]';

function main(argv: string[]): void {
  const { values, positionals } = parseArgs({
    args: argv,
    options: { dtype: { type: 'string', default: 'f32' }, help: { type: 'boolean', short: 'h' } },
    allowPositionals: true,
  });
  if (values.help) {
    console.log(USAGE);
    return;
  }
  const [dir, out] = positionals;
  if (dir === undefined || out === undefined || positionals.length > 2) {
    console.error(`convert: expected a checkpoint directory and an output file\n${USAGE}`);
    process.exit(2);
  }
  if (values.dtype !== 'f32' && values.dtype !== 'f16') {
    console.error(`convert: --dtype expects f32 or f16, got '${values.dtype}'\n${USAGE}`);
    process.exit(2);
  }
  convertCheckpoint(dir, [{ file: out, dtype: values.dtype }]);
  console.log(`${out}: ${(statSync(out).size / 2 ** 20).toFixed(1)} MiB, ${values.dtype.toUpperCase()}`);
}

if (
  process.argv[1] !== undefined &&
  resolve(process.argv[1]) === resolve(new URL(import.meta.url).pathname)
) {
  try {
    main(process.argv.slice(2));
  } catch (e) {
    console.error(`convert: ${(e as Error).message}`);
    process.exit(1);
  }
}
