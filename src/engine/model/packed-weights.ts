/**
 * One rank's weights packed for the WASM matmul: linear layers transposed to [in, out]
 * in column panels (WeightMatrix) and fused (q|k|v, gate|up), sliced for the rank.
 * Every weight (norms, biases and the embedding too) is rounded to the model's dtype, or
 * under `auto` kept in the dtype its checkpoint stores it in (values unchanged); the
 * projections and the embedding are held in that dtype (see WasmRuntime.weightStorage), the
 * small vectors widened to float32.
 */
import type { ModelDtype } from '../../config/types.ts';
import { decoderFor, encoderFor } from '../../kv/dtype.ts';
import type { ModelDims, RankShard } from './dims.ts';
import { type WasmRuntime, type WeightDtype, type WeightMatrix, weightIndex } from './kernels/wasm-matmul.ts';
import type { SafetensorsDtype } from './safetensors.ts';
import type { TensorMap } from './weights.ts';

export interface PackedLayer {
  inputNorm: Float32Array;
  postNorm: Float32Array;
  /** [hidden, (heads + 2 × kvHeads) × headDim] */
  qkv: WeightMatrix;
  /** q|k|v biases of this rank (qwen2), else null. */
  qkvBias: Float32Array | null;
  /** [heads × headDim, hidden] */
  o: WeightMatrix;
  /** [hidden, 2 × intermediate] */
  gateUp: WeightMatrix;
  /** [intermediate, hidden] */
  down: WeightMatrix;
}

export interface PackedWeights {
  embedding: EmbeddingRows;
  finalNorm: Float32Array;
  /** [hidden, vocab] */
  lmHead: WeightMatrix;
  layers: PackedLayer[];
}

const decodeTables = new Map<'float16' | 'bfloat16', Float32Array>();

/** Every one of the 65536 bit patterns of a half type, widened (exact), for table look-ups. */
function decodeTable(dtype: 'float16' | 'bfloat16'): Float32Array {
  let table = decodeTables.get(dtype);
  if (table === undefined) {
    table = new Float32Array(65536);
    const widen = decoderFor(dtype);
    for (let b = 0; b < 65536; b++) table[b] = widen(b);
    decodeTables.set(dtype, table);
  }
  return table;
}

/** A float32 value rounded to `dtype` (float32 keeps it). */
function roundingTo(dtype: WeightDtype): (v: number) => number {
  if (dtype === 'float32') return (v) => v;
  const toBits = encoderFor(dtype);
  const table = decodeTable(dtype);
  return (v) => table[toBits(v)] as number;
}

/** `data` rounded to `dtype` (a copy; float32 keeps the values). */
export function roundToDtype(data: Float32Array, dtype: WeightDtype): Float32Array {
  const round = roundingTo(dtype);
  return data.map(round);
}

/** The embedding table, held in the model's dtype; rows are widened to float32 on look-up. */
export class EmbeddingRows {
  readonly #f32: Float32Array | null;
  readonly #bits: Uint16Array | null;
  readonly #table: Float32Array | null;
  readonly #dim: number;

  constructor(data: Float32Array, dim: number, dtype: WeightDtype) {
    this.#dim = dim;
    if (dtype === 'float32') {
      this.#f32 = data.slice();
      this.#bits = null;
      this.#table = null;
    } else {
      const toBits = encoderFor(dtype);
      const bits = new Uint16Array(data.length);
      for (let i = 0; i < data.length; i++) bits[i] = toBits(data[i] as number);
      this.#f32 = null;
      this.#bits = bits;
      this.#table = decodeTable(dtype);
    }
  }

  /** Bytes held. */
  get byteLength(): number {
    return (this.#f32 ?? this.#bits)?.byteLength ?? 0;
  }

  /** Writes row `token` into `mem` at float offset `at`. */
  copyRow(token: number, mem: Float32Array, at: number): void {
    const d = this.#dim;
    if (this.#f32 !== null) {
      mem.set(this.#f32.subarray(token * d, (token + 1) * d), at);
      return;
    }
    const bits = this.#bits as Uint16Array;
    const table = this.#table as Float32Array;
    const from = token * d;
    for (let i = 0; i < d; i++) mem[at + i] = table[bits[from + i] as number] as number;
  }
}

const FROM_SAFETENSORS: Record<SafetensorsDtype, WeightDtype> = {
  F32: 'float32',
  F16: 'float16',
  BF16: 'bfloat16',
};

/** The dtype of tensor(s) `names` under `dtype`: auto keeps a common stored dtype, else float32. */
export function tensorDtype(tensors: TensorMap, dtype: ModelDtype, ...names: string[]): WeightDtype {
  if (dtype !== 'auto') return dtype;
  const stored = new Set(names.map((n) => FROM_SAFETENSORS[tensors.get(n)?.dtype ?? 'F32']));
  return stored.size === 1 ? ([...stored][0] as WeightDtype) : 'float32';
}

interface Slice {
  /** HF weight [outDim, inDim]. */
  w: Float32Array;
  inDim: number;
  outStart: number;
  outCount: number;
  inStart: number;
}

/** Packs slices side by side into a new [inCount, Σ outCount] matrix of the model's dtype. */
function packTransposed(rt: WasmRuntime, dtype: WeightDtype, inCount: number, slices: Slice[]): WeightMatrix {
  const width = slices.reduce((a, s) => a + s.outCount, 0);
  const storage = rt.weightStorage(dtype);
  const w = rt.allocWeight(inCount, width, storage);
  const off = w.offset;
  let col = 0;
  // Half storage holds each value's bits; float32 storage holds it rounded to `dtype` first
  // (the values a half kernel would read).
  const mem: Float32Array | Uint16Array = storage === 'float32' ? rt.f32 : rt.u16;
  const convert = storage === 'float32' ? roundingTo(dtype) : encoderFor(storage);
  for (const s of slices) {
    for (let o = 0; o < s.outCount; o++) {
      const row = (s.outStart + o) * s.inDim + s.inStart;
      const at = off + weightIndex(w, 0, col + o);
      const stride = weightIndex(w, 1, col + o) - weightIndex(w, 0, col + o);
      for (let i = 0; i < inCount; i++) mem[at + i * stride] = convert(s.w[row + i] as number);
    }
    col += s.outCount;
  }
  return w;
}

function concat(parts: Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

export function packWeights(
  rt: WasmRuntime,
  tensors: TensorMap,
  dims: ModelDims,
  shard: RankShard,
  modelDtype: ModelDtype = 'float32',
): PackedWeights {
  const dtypeOf = (...names: string[]): WeightDtype => tensorDtype(tensors, modelDtype, ...names);
  const get = (name: string): Float32Array => {
    const t = tensors.get(name);
    if (t === undefined) throw new Error(`internal: tensor ${name} missing after validation`);
    return t.data;
  };
  const h = dims.hiddenSize;
  const hd = dims.headDim;
  const layers: PackedLayer[] = [];
  for (let l = 0; l < dims.numLayers; l++) {
    const p = `model.layers.${l}`;
    const attn = `${p}.self_attn`;
    const qkv = packTransposed(
      rt,
      dtypeOf(`${attn}.q_proj.weight`, `${attn}.k_proj.weight`, `${attn}.v_proj.weight`),
      h,
      [
        {
          w: get(`${p}.self_attn.q_proj.weight`),
          inDim: h,
          outStart: shard.headStart * hd,
          outCount: shard.numHeads * hd,
          inStart: 0,
        },
        {
          w: get(`${p}.self_attn.k_proj.weight`),
          inDim: h,
          outStart: shard.kvHeadStart * hd,
          outCount: shard.numKvHeads * hd,
          inStart: 0,
        },
        {
          w: get(`${p}.self_attn.v_proj.weight`),
          inDim: h,
          outStart: shard.kvHeadStart * hd,
          outCount: shard.numKvHeads * hd,
          inStart: 0,
        },
      ],
    );
    const qkvBias = dims.qkvBias
      ? roundToDtype(
          concat([
            get(`${p}.self_attn.q_proj.bias`).subarray(
              shard.headStart * hd,
              (shard.headStart + shard.numHeads) * hd,
            ),
            get(`${p}.self_attn.k_proj.bias`).subarray(
              shard.kvHeadStart * hd,
              (shard.kvHeadStart + shard.numKvHeads) * hd,
            ),
            get(`${p}.self_attn.v_proj.bias`).subarray(
              shard.kvHeadStart * hd,
              (shard.kvHeadStart + shard.numKvHeads) * hd,
            ),
          ]),
          dtypeOf(`${attn}.q_proj.bias`, `${attn}.k_proj.bias`, `${attn}.v_proj.bias`),
        )
      : null;
    const qDimGlobal = dims.numHeads * hd;
    const o = packTransposed(rt, dtypeOf(`${attn}.o_proj.weight`), shard.numHeads * hd, [
      {
        w: get(`${p}.self_attn.o_proj.weight`),
        inDim: qDimGlobal,
        outStart: 0,
        outCount: h,
        inStart: shard.headStart * hd,
      },
    ]);
    const inter = dims.intermediateSize;
    const gateUp = packTransposed(rt, dtypeOf(`${p}.mlp.gate_proj.weight`, `${p}.mlp.up_proj.weight`), h, [
      {
        w: get(`${p}.mlp.gate_proj.weight`),
        inDim: h,
        outStart: shard.interStart,
        outCount: shard.intermediateSize,
        inStart: 0,
      },
      {
        w: get(`${p}.mlp.up_proj.weight`),
        inDim: h,
        outStart: shard.interStart,
        outCount: shard.intermediateSize,
        inStart: 0,
      },
    ]);
    const down = packTransposed(rt, dtypeOf(`${p}.mlp.down_proj.weight`), shard.intermediateSize, [
      {
        w: get(`${p}.mlp.down_proj.weight`),
        inDim: inter,
        outStart: 0,
        outCount: h,
        inStart: shard.interStart,
      },
    ]);
    layers.push({
      inputNorm: roundToDtype(get(`${p}.input_layernorm.weight`), dtypeOf(`${p}.input_layernorm.weight`)),
      postNorm: roundToDtype(
        get(`${p}.post_attention_layernorm.weight`),
        dtypeOf(`${p}.post_attention_layernorm.weight`),
      ),
      qkv,
      qkvBias,
      o,
      gateUp,
      down,
    });
  }
  const embeddingData = get('model.embed_tokens.weight');
  const embedding = new EmbeddingRows(embeddingData, dims.hiddenSize, dtypeOf('model.embed_tokens.weight'));
  const head = dims.tieWordEmbeddings ? embeddingData : get('lm_head.weight');
  const headName = dims.tieWordEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight';
  const lmHead = packTransposed(rt, dtypeOf(headName), h, [
    { w: head, inDim: h, outStart: 0, outCount: dims.vocabSize, inStart: 0 },
  ]);
  return {
    embedding,
    finalNorm: roundToDtype(get('model.norm.weight'), dtypeOf('model.norm.weight')),
    lmHead,
    layers,
  };
}
