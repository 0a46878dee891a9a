/**
 * Model weights as HF-named float32 tensors ([out, in] for linear layers): the names and
 * shapes a config implies, generated deterministically for a preset, or written as a
 * checkpoint directory (reading one is checkpoint.ts).
 */
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { HFModelConfig, ModelPreset } from '../../config/model-presets.ts';
import { type ModelDims, modelDims } from './dims.ts';
import { SeededRandom } from './prng.ts';
import { type SafetensorsDtype, writeSafetensorsFile } from './safetensors.ts';

export interface Tensor {
  shape: number[];
  /** The values, widened to float32. */
  data: Float32Array;
  /** How the checkpoint stores them (absent: float32, e.g. generated weights). */
  dtype?: SafetensorsDtype;
}

export type TensorMap = Map<string, Tensor>;

/** Every tensor name the model reads, with its expected shape. */
export function expectedTensorShapes(dims: ModelDims): Map<string, number[]> {
  const { hiddenSize: h, intermediateSize: inter, headDim: hd, numHeads, numKvHeads, vocabSize } = dims;
  const shapes = new Map<string, number[]>();
  shapes.set('model.embed_tokens.weight', [vocabSize, h]);
  for (let l = 0; l < dims.numLayers; l++) {
    const p = `model.layers.${l}`;
    shapes.set(`${p}.input_layernorm.weight`, [h]);
    shapes.set(`${p}.self_attn.q_proj.weight`, [numHeads * hd, h]);
    shapes.set(`${p}.self_attn.k_proj.weight`, [numKvHeads * hd, h]);
    shapes.set(`${p}.self_attn.v_proj.weight`, [numKvHeads * hd, h]);
    if (dims.qkvBias) {
      shapes.set(`${p}.self_attn.q_proj.bias`, [numHeads * hd]);
      shapes.set(`${p}.self_attn.k_proj.bias`, [numKvHeads * hd]);
      shapes.set(`${p}.self_attn.v_proj.bias`, [numKvHeads * hd]);
    }
    shapes.set(`${p}.self_attn.o_proj.weight`, [h, numHeads * hd]);
    shapes.set(`${p}.post_attention_layernorm.weight`, [h]);
    shapes.set(`${p}.mlp.gate_proj.weight`, [inter, h]);
    shapes.set(`${p}.mlp.up_proj.weight`, [inter, h]);
    shapes.set(`${p}.mlp.down_proj.weight`, [h, inter]);
  }
  shapes.set('model.norm.weight', [h]);
  if (!dims.tieWordEmbeddings) shapes.set('lm_head.weight', [vocabSize, h]);
  return shapes;
}

// Init scales tuned so a random model's greedy output depends on its context instead of
// echoing the last token (tied embeddings favour that when the embedding dominates the
// residual): a small embedding, sharp attention, strong attention/MLP outputs.
const EMBED_STD = 0.2;
const PROJ_GAIN = 1.5;
const OUT_GAIN = 2;

/** The preset's weights; the same bits on every machine for the same weightSeed. */
export function generatePresetTensors(preset: ModelPreset): TensorMap {
  const dims = modelDims(preset.config);
  const rng = new SeededRandom(preset.weightSeed);
  const tensors: TensorMap = new Map();
  for (const [name, shape] of expectedTensorShapes(dims)) {
    const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
    if (shape.length === 1) {
      rng.fillGaussian(data, 0.05, 1);
    } else {
      const fanIn = shape[1] as number;
      let std = PROJ_GAIN / Math.sqrt(fanIn);
      if (name.endsWith('embed_tokens.weight') || name === 'lm_head.weight') std = EMBED_STD;
      else if (name.endsWith('o_proj.weight') || name.endsWith('down_proj.weight'))
        std = OUT_GAIN / Math.sqrt(fanIn);
      rng.fillGaussian(data, std);
    }
    tensors.set(name, { shape, data });
  }
  return tensors;
}

/** Writes config.json + model.safetensors (tests, exporting a preset as a checkpoint). */
export function writeCheckpointDir(
  dir: string,
  config: HFModelConfig,
  tensors: TensorMap,
  dtype: SafetensorsDtype = 'F32',
): void {
  writeFileSync(join(dir, 'config.json'), `${JSON.stringify(config, null, 2)}\n`);
  const out = new Map<string, { dtype: SafetensorsDtype; shape: number[]; data: Float32Array }>();
  for (const [name, t] of tensors) out.set(name, { dtype, shape: t.shape, data: t.data });
  writeSafetensorsFile(join(dir, 'model.safetensors'), out, { format: 'pt' });
}

/** SHA-256 over tensor names, shapes and float32 bytes (in name order). */
export function tensorsDigest(tensors: TensorMap): string {
  const h = createHash('sha256');
  for (const name of [...tensors.keys()].sort()) {
    const t = tensors.get(name) as Tensor;
    h.update(`${name}:${t.shape.join('x')};`);
    h.update(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength));
  }
  return h.digest('hex');
}
