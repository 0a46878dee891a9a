/**
 * The test oracle for the model: a straightforward forward over one whole sequence with
 * contiguous K/V, unsharded HF weights and the plain reference kernels. Slow by design.
 */
import type { HFModelConfig } from '../../config/model-presets.ts';
import { modelDims } from './dims.ts';
import { attentionRef, linearRef, rmsnormRef, ropeRef, siluRef } from './kernels/reference.ts';
import { ropeInvFreq } from './rope.ts';
import type { TensorMap } from './weights.ts';

/** Logits [tokens.length, vocab] for every position of the sequence. */
export function referenceForward(
  config: HFModelConfig,
  tensors: TensorMap,
  tokens: readonly number[],
): Float32Array {
  const d = modelDims(config);
  const w = (name: string): Float32Array => {
    const t = tensors.get(name);
    if (t === undefined) throw new Error(`missing ${name}`);
    return t.data;
  };
  const T = tokens.length;
  const h = d.hiddenSize;
  const hd = d.headDim;
  const group = d.numHeads / d.numKvHeads;
  const invFreq = ropeInvFreq(hd, d.ropeTheta, d.ropeScaling);
  const withBias = (y: Float32Array, name: string): Float32Array => {
    if (!d.qkvBias) return y;
    const b = w(name);
    for (let i = 0; i < y.length; i++) y[i] = (y[i] as number) + (b[i % b.length] as number);
    return y;
  };
  const x = new Float32Array(T * h);
  const emb = w('model.embed_tokens.weight');
  tokens.forEach((tok, t) => {
    x.set(emb.subarray(tok * h, (tok + 1) * h), t * h);
  });
  for (let l = 0; l < d.numLayers; l++) {
    const p = `model.layers.${l}`;
    const hn = rmsnormRef(x, w(`${p}.input_layernorm.weight`), T, h, d.rmsNormEps);
    const proj = (name: string, out: number) =>
      withBias(linearRef(hn, w(`${p}.self_attn.${name}.weight`), T, h, out), `${p}.self_attn.${name}.bias`);
    const q = proj('q_proj', d.numHeads * hd);
    const k = proj('k_proj', d.numKvHeads * hd);
    const v = proj('v_proj', d.numKvHeads * hd);
    for (let t = 0; t < T; t++) {
      for (let i = 0; i < d.numHeads; i++) ropeRef(q, (t * d.numHeads + i) * hd, invFreq, t);
      for (let i = 0; i < d.numKvHeads; i++) ropeRef(k, (t * d.numKvHeads + i) * hd, invFreq, t);
    }
    const window = d.layerTypes[l] === 'sliding_attention' ? d.slidingWindow : null;
    const attn = new Float32Array(T * d.numHeads * hd);
    for (let kvh = 0; kvh < d.numKvHeads; kvh++) {
      const keys = new Float32Array(T * hd);
      const values = new Float32Array(T * hd);
      for (let t = 0; t < T; t++) {
        keys.set(k.subarray((t * d.numKvHeads + kvh) * hd, (t * d.numKvHeads + kvh + 1) * hd), t * hd);
        values.set(v.subarray((t * d.numKvHeads + kvh) * hd, (t * d.numKvHeads + kvh + 1) * hd), t * hd);
      }
      for (let head = kvh * group; head < (kvh + 1) * group; head++) {
        for (let t = 0; t < T; t++) {
          const qv = q.subarray((t * d.numHeads + head) * hd, (t * d.numHeads + head + 1) * hd);
          const lo = window === null ? 0 : Math.max(0, t - window + 1);
          attn.set(attentionRef(qv, keys, values, hd, lo, t), (t * d.numHeads + head) * hd);
        }
      }
    }
    const o = linearRef(attn, w(`${p}.self_attn.o_proj.weight`), T, d.numHeads * hd, h);
    for (let i = 0; i < x.length; i++) x[i] = (x[i] as number) + (o[i] as number);
    const hn2 = rmsnormRef(x, w(`${p}.post_attention_layernorm.weight`), T, h, d.rmsNormEps);
    const gate = linearRef(hn2, w(`${p}.mlp.gate_proj.weight`), T, h, d.intermediateSize);
    const up = linearRef(hn2, w(`${p}.mlp.up_proj.weight`), T, h, d.intermediateSize);
    for (let i = 0; i < gate.length; i++) gate[i] = siluRef(gate[i] as number) * (up[i] as number);
    const down = linearRef(gate, w(`${p}.mlp.down_proj.weight`), T, d.intermediateSize, h);
    for (let i = 0; i < x.length; i++) x[i] = (x[i] as number) + (down[i] as number);
  }
  const xn = rmsnormRef(x, w('model.norm.weight'), T, h, d.rmsNormEps);
  const head = d.tieWordEmbeddings ? emb : w('lm_head.weight');
  return linearRef(xn, head, T, h, d.vocabSize);
}
