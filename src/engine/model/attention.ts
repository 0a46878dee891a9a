/**
 * Paged attention of one sequence for one layer (prefill and chunked prefill). K and V of
 * the visible positions are staged from the paged KV memory block by block: V with one
 * memcpy per block (the KV layout already holds a token's V row for all heads), K
 * transposed per head so it can be the matmul's right operand. Scores and outputs are then
 * computed with the WASM matmul over blocks of query tokens, so a causal or
 * sliding-window mask wastes little work. Decode-sized sequences use decode-attention.ts.
 */
import type { WasmRuntime } from './kernels/wasm-matmul.ts';
import { forEachBlockRun, kRowOffset, type LayerKV, readElement } from './paged-kv.ts';

/** Query tokens per score block. */
export const QUERY_BLOCK = 32;

export interface AttentionShape {
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  /** null for full attention. */
  slidingWindow: number | null;
}

/** Scratch regions (float offsets in the runtime) sized for `maxContext` positions. */
export interface AttentionScratch {
  maxContext: number;
  keysT: number;
  values: number;
  queries: number;
  scores: number;
  outputs: number;
}

export function allocAttentionScratch(
  rt: WasmRuntime,
  shape: AttentionShape,
  maxContext: number,
): AttentionScratch {
  const group = shape.numHeads / shape.numKvHeads;
  const rows = QUERY_BLOCK * group;
  return {
    maxContext,
    keysT: rt.alloc(shape.numKvHeads * shape.headDim * maxContext),
    values: rt.alloc(shape.numKvHeads * maxContext * shape.headDim),
    queries: rt.alloc(rows * shape.headDim),
    scores: rt.alloc(rows * maxContext),
    outputs: rt.alloc(rows * shape.headDim),
  };
}

export interface AttentionCall {
  /** Float offset of row 0 of the q/k/v projection output and its row stride. */
  qkv: number;
  qkvStride: number;
  /** Float offset of row 0 of the attention output ([rows, numHeads × headDim]). */
  out: number;
  /** Row of this sequence's first new token. */
  firstRow: number;
  len: number;
  numComputedTokens: number;
  blockTable: readonly number[];
  /** The same block table as an Int32Array (what the native kernels read). */
  blockTable32: Int32Array;
}

export function pagedAttention(
  rt: WasmRuntime,
  shape: AttentionShape,
  layer: LayerKV,
  scratch: AttentionScratch,
  call: AttentionCall,
): void {
  const { numHeads, numKvHeads, headDim: hd, slidingWindow: window } = shape;
  const group = numHeads / numKvHeads;
  const p0 = call.numComputedTokens;
  const hi = p0 + call.len - 1;
  const lo = window === null ? 0 : Math.max(0, p0 - window + 1);
  const ctx = hi - lo + 1;
  gather(rt, layer, scratch, call, lo, ctx, numKvHeads, hd);
  if (rt.nativeOps) {
    rt.attentionPrefill({
      qkv: call.qkv,
      qkvStride: call.qkvStride,
      out: call.out,
      outStride: numHeads * hd,
      firstRow: call.firstRow,
      len: call.len,
      p0,
      lo,
      ctx,
      keysT: scratch.keysT,
      values: scratch.values,
      numHeads,
      numKvHeads,
      headDim: hd,
      window: window ?? 0,
      queryBlock: QUERY_BLOCK,
    });
    return;
  }
  const mem = rt.f32;
  const scale = 1 / Math.sqrt(hd);
  const qDim = numHeads * hd;
  for (let t0 = 0; t0 < call.len; t0 += QUERY_BLOCK) {
    const t1 = Math.min(call.len, t0 + QUERY_BLOCK);
    const rows = (t1 - t0) * group;
    const kLo = window === null ? lo : Math.max(lo, p0 + t0 - window + 1);
    const kHi = p0 + t1 - 1;
    const kn = kHi - kLo + 1;
    for (let h = 0; h < numKvHeads; h++) {
      for (let t = t0; t < t1; t++) {
        const src = call.qkv + (call.firstRow + t) * call.qkvStride + h * group * hd;
        const dst = scratch.queries + (t - t0) * group * hd;
        for (let i = 0; i < group * hd; i++) mem[dst + i] = (mem[src + i] as number) * scale;
      }
      const kt = scratch.keysT + h * hd * ctx + (kLo - lo);
      rt.matmul(rows, kn, hd, scratch.queries, hd, kt, ctx, scratch.scores, kn);
      for (let r = 0; r < rows; r++) {
        const p = p0 + t0 + Math.floor(r / group);
        const first = (window === null ? 0 : Math.max(0, p - window + 1)) - kLo;
        softmaxMasked(rt, scratch.scores + r * kn, kn, Math.max(0, first), p - kLo);
      }
      const v = scratch.values + (kLo - lo) * numKvHeads * hd + h * hd;
      rt.matmul(rows, hd, kn, scratch.scores, kn, v, numKvHeads * hd, scratch.outputs, hd);
      for (let t = t0; t < t1; t++) {
        const dst = call.out + (call.firstRow + t) * qDim + h * group * hd;
        const src = scratch.outputs + (t - t0) * group * hd;
        mem.copyWithin(dst, src, src + group * hd);
      }
    }
  }
}

/** Softmax over [from, to] of a row of length n; everything outside becomes 0. */
function softmaxMasked(rt: WasmRuntime, row: number, n: number, from: number, to: number): void {
  rt.softmax(row + from, to - from + 1);
  const mem = rt.f32;
  if (from > 0) mem.fill(0, row, row + from);
  if (to < n - 1) mem.fill(0, row + to + 1, row + n);
}

function gather(
  rt: WasmRuntime,
  layer: LayerKV,
  scratch: AttentionScratch,
  { blockTable, blockTable32 }: AttentionCall,
  lo: number,
  ctx: number,
  numKvHeads: number,
  hd: number,
): void {
  const mem = rt.f32;
  const rs = layer.rowSize;
  const bs = layer.blockSize;
  const vShift = bs * rs;
  const src = layer.f32;
  const hi = lo + ctx - 1;
  if (src !== null && rt.nativeOps) {
    rt.gatherKV(src, blockTable32, bs, numKvHeads, hd, lo, ctx, scratch.keysT, scratch.values);
    return;
  }
  if (src === null) {
    for (let i = 0; i < ctx; i++) {
      const k = kRowOffset(layer, blockTable, lo + i);
      for (let h = 0; h < numKvHeads; h++) {
        const kt = scratch.keysT + h * hd * ctx + i;
        for (let d = 0; d < hd; d++) mem[kt + d * ctx] = readElement(layer, k + h * hd + d);
      }
      for (let e = 0; e < rs; e++) mem[scratch.values + i * rs + e] = readElement(layer, k + vShift + e);
    }
    return;
  }
  forEachBlockRun(blockTable, bs, rs, lo, hi, (from, j0, n) => {
    mem.set(src.subarray(from + vShift, from + vShift + n * rs), scratch.values + (j0 - lo) * rs);
    for (let h = 0; h < numKvHeads; h++) {
      const kt = scratch.keysT + h * hd * ctx + (j0 - lo);
      for (let d = 0; d < hd; d++) {
        const dst = kt + d * ctx;
        let at = from + h * hd + d;
        for (let i = 0; i < n; i++, at += rs) mem[dst + i] = src[at] as number;
      }
    }
  });
}
