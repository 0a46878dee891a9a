/**
 * One tensor-parallel rank's share of an adapter, ready to apply: for column-parallel
 * projections (q, k, v, gate, up) lora_B's rows of this rank's output slice; for
 * row-parallel ones (o, down) lora_A's columns of this rank's input slice, so the ranks'
 * partial B(A x) add up in the same all-reduce as the base projection. The scaling is
 * folded into B.
 *
 * The delta y += B(A x) runs as plain loops: with r ≤ 64 it costs r·(in + out) per row,
 * a small fraction of the base projection's in·out.
 */
import type { ModelDims, RankShard } from '../model/dims.ts';
import type { LoraPair, LoraTarget, PeftAdapter } from './peft-adapter.ts';

export interface RankLoraPair {
  r: number;
  /** [r, inCount] row-major. */
  a: Float32Array;
  /** [outCount, r] row-major, scaled. */
  b: Float32Array;
  inCount: number;
  outCount: number;
}

export type RankLoraLayer = Partial<Record<LoraTarget, RankLoraPair>>;

export interface RankLora {
  rank: number;
  layers: RankLoraLayer[];
}

function slice(
  pair: LoraPair,
  r: number,
  scaling: number,
  inStart: number,
  inCount: number,
  outStart: number,
  outCount: number,
): RankLoraPair {
  const a = new Float32Array(r * inCount);
  for (let j = 0; j < r; j++)
    a.set(pair.a.subarray(j * pair.inDim + inStart, j * pair.inDim + inStart + inCount), j * inCount);
  const b = new Float32Array(outCount * r);
  for (let o = 0; o < outCount; o++)
    for (let j = 0; j < r; j++) b[o * r + j] = (pair.b[(outStart + o) * r + j] as number) * scaling;
  return { r, a, b, inCount, outCount };
}

export function rankLora(adapter: PeftAdapter, dims: ModelDims, shard: RankShard): RankLora {
  const hd = dims.headDim;
  const r = adapter.rank;
  const s = adapter.scaling;
  const layers = adapter.layers.map((targets) => {
    const out: RankLoraLayer = {};
    for (const [target, pair] of targets) {
      switch (target) {
        case 'q_proj':
          out[target] = slice(pair, r, s, 0, pair.inDim, shard.headStart * hd, shard.numHeads * hd);
          break;
        case 'k_proj':
        case 'v_proj':
          out[target] = slice(pair, r, s, 0, pair.inDim, shard.kvHeadStart * hd, shard.numKvHeads * hd);
          break;
        case 'gate_proj':
        case 'up_proj':
          out[target] = slice(pair, r, s, 0, pair.inDim, shard.interStart, shard.intermediateSize);
          break;
        case 'o_proj':
          out[target] = slice(pair, r, s, shard.headStart * hd, shard.numHeads * hd, 0, pair.outDim);
          break;
        case 'down_proj':
          out[target] = slice(pair, r, s, shard.interStart, shard.intermediateSize, 0, pair.outDim);
          break;
      }
    }
    return out;
  });
  return { rank: r, layers };
}

/**
 * mem[out + row·outStride + o] += Σ_j b[o, j] · Σ_i a[j, i] · mem[x + row·xStride + i]
 * for the `rows` rows from `firstRow`.
 */
export function addLoraDelta(
  mem: Float32Array,
  pair: RankLoraPair,
  firstRow: number,
  rows: number,
  x: number,
  xStride: number,
  out: number,
  outStride: number,
): void {
  const { r, a, b, inCount, outCount } = pair;
  const t = new Float32Array(r);
  for (let row = firstRow; row < firstRow + rows; row++) {
    const xr = x + row * xStride;
    for (let j = 0; j < r; j++) {
      let acc = 0;
      const aj = j * inCount;
      for (let i = 0; i < inCount; i++) acc += (a[aj + i] as number) * (mem[xr + i] as number);
      t[j] = acc;
    }
    const or = out + row * outStride;
    for (let o = 0; o < outCount; o++) {
      let acc = 0;
      const bo = o * r;
      for (let j = 0; j < r; j++) acc += (b[bo + j] as number) * (t[j] as number);
      mem[or + o] = (mem[or + o] as number) + acc;
    }
  }
}
