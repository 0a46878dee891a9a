/**
 * One rank's weights packed for the WASM matmul: linear layers transposed to [in, out]
 * (so output columns are contiguous) and fused (q|k|v, gate|up), sliced for the rank.
 */
import type { ModelDims, RankShard } from './dims.ts';
import type { WasmRuntime } from './kernels/wasm-matmul.ts';
import type { TensorMap } from './weights.ts';

export interface PackedLayer {
  inputNorm: Float32Array;
  postNorm: Float32Array;
  /** [hidden, (heads + 2 × kvHeads) × headDim] */
  qkv: number;
  /** q|k|v biases of this rank (qwen2), else null. */
  qkvBias: Float32Array | null;
  /** [heads × headDim, hidden] */
  o: number;
  /** [hidden, 2 × intermediate] */
  gateUp: number;
  /** [intermediate, hidden] */
  down: number;
}

export interface PackedWeights {
  embedding: Float32Array;
  finalNorm: Float32Array;
  /** [hidden, vocab] */
  lmHead: number;
  layers: PackedLayer[];
}

interface Slice {
  /** HF weight [outDim, inDim]. */
  w: Float32Array;
  inDim: number;
  outStart: number;
  outCount: number;
  inStart: number;
}

/** Packs slices side by side into a new [inCount, Σ outCount] matrix. */
function packTransposed(rt: WasmRuntime, inCount: number, slices: Slice[]): number {
  const width = slices.reduce((a, s) => a + s.outCount, 0);
  const off = rt.alloc(inCount * width);
  const mem = rt.f32;
  let col = 0;
  for (const s of slices) {
    for (let o = 0; o < s.outCount; o++) {
      const row = (s.outStart + o) * s.inDim + s.inStart;
      for (let i = 0; i < inCount; i++) mem[off + i * width + col + o] = s.w[row + i] as number;
    }
    col += s.outCount;
  }
  return off;
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
): PackedWeights {
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
    const qkv = packTransposed(rt, h, [
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
    ]);
    const qkvBias = dims.qkvBias
      ? concat([
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
        ])
      : null;
    const qDimGlobal = dims.numHeads * hd;
    const o = packTransposed(rt, shard.numHeads * hd, [
      {
        w: get(`${p}.self_attn.o_proj.weight`),
        inDim: qDimGlobal,
        outStart: 0,
        outCount: h,
        inStart: shard.headStart * hd,
      },
    ]);
    const inter = dims.intermediateSize;
    const gateUp = packTransposed(rt, h, [
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
    const down = packTransposed(rt, shard.intermediateSize, [
      {
        w: get(`${p}.mlp.down_proj.weight`),
        inDim: inter,
        outStart: 0,
        outCount: h,
        inStart: shard.interStart,
      },
    ]);
    layers.push({
      inputNorm: get(`${p}.input_layernorm.weight`).slice(),
      postNorm: get(`${p}.post_attention_layernorm.weight`).slice(),
      qkv,
      qkvBias,
      o,
      gateUp,
      down,
    });
  }
  const embedding = get('model.embed_tokens.weight').slice();
  const head = dims.tieWordEmbeddings ? embedding : get('lm_head.weight');
  const lmHead = packTransposed(rt, h, [
    { w: head, inDim: h, outStart: 0, outCount: dims.vocabSize, inStart: 0 },
  ]);
  return { embedding, finalNorm: get('model.norm.weight').slice(), lmHead, layers };
}
