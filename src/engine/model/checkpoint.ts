/**
 * Reading a HF checkpoint directory: config.json plus `model.safetensors`, or shards listed
 * by `model.safetensors.index.json`. Every tensor in the files must be one the model uses
 * (or a redundant copy it can check: a tied `lm_head.weight`, `rotary_emb.inv_freq`);
 * anything else fails the load naming it, so a bias or head the decoder would ignore is
 * never dropped silently.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { type ErrorCode, KVError } from '../../errors/index.ts';
import type { ModelDims } from './dims.ts';
import { ropeInvFreq } from './rope.ts';
import { indexSafetensorsFile, tensorToFloat32 } from './safetensors.ts';
import { expectedTensorShapes, type TensorMap } from './weights.ts';

export const INDEX_FILE = 'model.safetensors.index.json';

function readJsonObject(file: string, code: ErrorCode, what: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (cause) {
    throw new KVError(code, `Invalid ${what}: ${file} is not readable JSON`, {
      hint: `Fix or re-download ${what}.`,
      cause,
    });
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new KVError(code, `Invalid ${what}: ${file} is not a JSON object`, {
      hint: `Fix or re-download ${what}.`,
    });
  }
  return parsed as Record<string, unknown>;
}

/** The safetensors files of a checkpoint, with the tensor names the index assigns to each. */
export function checkpointShards(dir: string): Array<{ file: string; names: Set<string> | null }> {
  const index = join(dir, INDEX_FILE);
  if (existsSync(index)) {
    const map = readJsonObject(index, 'SAFETENSORS_INVALID', INDEX_FILE).weight_map;
    if (map === null || typeof map !== 'object' || Array.isArray(map)) {
      throw new KVError('SAFETENSORS_INVALID', `Invalid ${index}: weight_map is not an object`, {
        hint: 'Re-download the checkpoint index.',
        field: 'weight_map',
      });
    }
    const byFile = new Map<string, Set<string>>();
    for (const [name, shard] of Object.entries(map as Record<string, unknown>)) {
      if (typeof shard !== 'string' || shard.includes('/') || shard.includes('\\')) {
        throw new KVError(
          'SAFETENSORS_INVALID',
          `Invalid ${index}: weight_map['${name}'] is not a file name`,
          {
            hint: 'Every weight_map value names a .safetensors file next to the index.',
            field: `weight_map.${name}`,
          },
        );
      }
      if (!byFile.has(shard)) byFile.set(shard, new Set());
      byFile.get(shard)?.add(name);
    }
    return [...byFile].map(([file, names]) => ({ file: join(dir, file), names }));
  }
  const single = join(dir, 'model.safetensors');
  if (!existsSync(single)) {
    const others = existsSync(dir)
      ? readdirSync(dir).filter((f) => /\.(safetensors|bin|pt|gguf)$/.test(f))
      : [];
    throw new KVError('MODEL_FILE_NOT_FOUND', `No model.safetensors or ${INDEX_FILE} in ${dir}`, {
      hint:
        others.length > 0
          ? `Found ${others.join(', ')}: kvconnect reads safetensors weights (one file, or shards with their ${INDEX_FILE}).`
          : 'Put the weights (model.safetensors, or shards with their index) next to config.json.',
    });
  }
  return [{ file: single, names: null }];
}

function sameValues(a: Float32Array, b: Float32Array, relTol: number): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    const x = a[i] as number;
    const y = b[i] as number;
    if (Math.abs(x - y) > relTol * Math.max(Math.abs(x), Math.abs(y))) return false;
  }
  return true;
}

/**
 * The tensors the model uses, checked against the files' headers. Each tensor's `data` is
 * read from its file and widened to float32 when accessed (every access reads again), so
 * packing the weights holds one tensor at a time instead of the whole checkpoint.
 */
export function readCheckpointTensors(dir: string, dims: ModelDims): TensorMap {
  const expected = expectedTensorShapes(dims);
  const tensors: TensorMap = new Map();
  const extra = new Map<string, { file: string; data: () => Float32Array }>();
  for (const { file, names } of checkpointShards(dir)) {
    const index = indexSafetensorsFile(file);
    for (const name of names ?? []) {
      if (!index.has(name)) {
        throw new KVError('MODEL_WEIGHTS_MISSING', `Tensor '${name}' is missing from ${file}`, {
          hint: `${INDEX_FILE} lists it in this shard; re-download the shard or the index.`,
        });
      }
    }
    for (const [name, entry] of index) {
      const read = () => tensorToFloat32(entry.read());
      const shape = expected.get(name);
      if (shape === undefined) {
        extra.set(name, { file, data: read });
        continue;
      }
      if (entry.shape.length !== shape.length || entry.shape.some((d, i) => d !== shape[i])) {
        throw new KVError(
          'MODEL_WEIGHTS_MISSING',
          `Tensor '${name}' in ${file} has shape ${JSON.stringify(entry.shape)}, expected ${JSON.stringify(shape)}`,
          { hint: 'The checkpoint does not match config.json.' },
        );
      }
      tensors.set(name, {
        shape,
        dtype: entry.dtype,
        get data() {
          return read();
        },
      });
    }
  }
  for (const name of expected.keys()) {
    if (!tensors.has(name)) {
      throw new KVError(
        'MODEL_WEIGHTS_MISSING',
        `Tensor '${name}' is missing from the checkpoint in ${dir}`,
        {
          hint: `The checkpoint does not match config.json (model_type ${dims.qkvBias ? 'qwen2 needs q/k/v biases' : 'and layer count'}), or a shard is missing.`,
        },
      );
    }
  }
  checkRedundant(extra, tensors, dims);
  return tensors;
}

function checkRedundant(
  extra: Map<string, { file: string; data: () => Float32Array }>,
  tensors: TensorMap,
  dims: ModelDims,
): void {
  const invFreq = ropeInvFreq(dims.headDim, dims.ropeTheta, dims.ropeScaling);
  for (const [name, { file, data }] of extra) {
    if (name === 'lm_head.weight' && dims.tieWordEmbeddings) {
      const embed = tensors.get('model.embed_tokens.weight')?.data;
      if (embed !== undefined && sameValues(data(), embed, 0)) continue;
      throw new KVError(
        'MODEL_WEIGHTS_UNUSED',
        `Tensor 'lm_head.weight' in ${file} differs from model.embed_tokens.weight, but config.json has tie_word_embeddings: true`,
        {
          hint: 'Set "tie_word_embeddings": false in config.json if the checkpoint has its own LM head.',
          field: 'model.tie_word_embeddings',
        },
      );
    }
    if (/^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$/.test(name)) {
      if (sameValues(data(), invFreq, 1e-5)) continue;
      throw new KVError(
        'MODEL_WEIGHTS_UNUSED',
        `Tensor '${name}' in ${file} holds RoPE frequencies that config.json (rope_theta ${dims.ropeTheta}, rope_scaling ${dims.ropeScaling.ropeType}) does not produce`,
        { hint: 'Fix rope_theta / rope_scaling in config.json to the values the model was trained with.' },
      );
    }
    throw new KVError(
      'MODEL_WEIGHTS_UNUSED',
      `Tensor '${name}' in ${file} is not used by a ${dims.qkvBias ? 'qwen2' : 'llama/mistral'} decoder with this config.json`,
      {
        hint: 'The checkpoint has weights kvconnect would ignore (e.g. biases, another head, a different architecture): loading it would compute something else than the model. Check model_type and the other fields of config.json.',
        details: { tensor: name, file },
      },
    );
  }
}
