/**
 * Paged attention for sequences with a few new tokens (decode). The visible context is
 * brought into WebAssembly memory one block at a time with a plain memcpy of the block's
 * K half and V half (no per-element gather, no transposition: the KV layout already holds
 * each token's K row for all KV heads contiguously), then every query head group (GQA: the
 * numHeads / numKvHeads query heads sharing a KV head) is computed with two SIMD matmuls
 * that read K and V once for the whole group:
 *
 *   scoresᵀ[ctx, group] = K_h[ctx, hd] · (q_group · scale)ᵀ[hd, group]   (K rows stride rowSize)
 *   out[group, hd]      = softmax(scores)[group, ctx] · V_h[ctx, hd]
 *
 * Reading K/V in place from the KV SharedArrayBuffer in plain TypeScript was measured
 * slower than this copy plus SIMD (see docs/model.md): the kernel cannot address the KV
 * buffer, and scalar TypeScript runs ~2 GFLOPS. With the native addon and a float32 KV cache,
 * native/kvops.c's attentionDecode computes the same bits reading K/V in place.
 */
import type { AttentionCall, AttentionShape } from './attention.ts';
import type { WasmRuntime } from './kernels/wasm-matmul.ts';
import { forEachBlockRun, kRowOffset, type LayerKV, readElement } from './paged-kv.ts';

/** Scratch regions (float offsets in the runtime) for contexts up to `maxContext`. */
export interface DecodeScratch {
  maxContext: number;
  /** Query heads per KV head, rounded up to a multiple of 4 (the kernel's vector width). */
  groupPadded: number;
  keys: number;
  values: number;
  queriesT: number;
  scoresT: number;
  probs: number;
}

export function allocDecodeScratch(
  rt: WasmRuntime,
  shape: AttentionShape,
  maxContext: number,
): DecodeScratch {
  const group = shape.numHeads / shape.numKvHeads;
  const groupPadded = Math.ceil(group / 4) * 4;
  const rowSize = shape.numKvHeads * shape.headDim;
  return {
    maxContext,
    groupPadded,
    keys: rt.alloc(maxContext * rowSize),
    values: rt.alloc(maxContext * rowSize),
    queriesT: rt.alloc(shape.headDim * groupPadded),
    scoresT: rt.alloc(maxContext * groupPadded),
    probs: rt.alloc(group * maxContext),
  };
}

export function pagedDecodeAttention(
  rt: WasmRuntime,
  shape: AttentionShape,
  layer: LayerKV,
  scratch: DecodeScratch,
  call: AttentionCall,
): void {
  const { numHeads, numKvHeads, headDim: hd, slidingWindow: window } = shape;
  const group = numHeads / numKvHeads;
  const gp = scratch.groupPadded;
  const rs = layer.rowSize;
  const qDim = numHeads * hd;
  const scale = 1 / Math.sqrt(hd);
  const p0 = call.numComputedTokens;
  const hi = p0 + call.len - 1;
  const lo = window === null ? 0 : Math.max(0, p0 - window + 1);
  if (layer.f32 !== null && rt.nativeOps) {
    rt.attentionDecode(layer.f32, call.blockTable32, layer.blockSize, call, shape, window ?? 0);
    return;
  }
  copyContext(rt, layer, scratch, call.blockTable, lo, hi);
  const mem = rt.f32;
  mem.fill(0, scratch.queriesT, scratch.queriesT + hd * gp);
  for (let t = 0; t < call.len; t++) {
    const p = p0 + t;
    const first = window === null ? 0 : Math.max(0, p - window + 1);
    const ctx = p - first + 1;
    const skip = (first - lo) * rs;
    const qRow = call.qkv + (call.firstRow + t) * call.qkvStride;
    for (let h = 0; h < numKvHeads; h++) {
      const q = qRow + h * group * hd;
      for (let g = 0; g < group; g++) {
        for (let d = 0; d < hd; d++)
          mem[scratch.queriesT + d * gp + g] = (mem[q + g * hd + d] as number) * scale;
      }
      const k = scratch.keys + skip + h * hd;
      rt.matmul(ctx, gp, hd, k, rs, scratch.queriesT, gp, scratch.scoresT, gp);
      softmaxColumns(rt, scratch.scoresT, gp, scratch.probs, group, ctx);
      const v = scratch.values + skip + h * hd;
      const out = call.out + (call.firstRow + t) * qDim + h * group * hd;
      rt.matmul(group, hd, ctx, scratch.probs, ctx, v, rs, out, hd);
    }
  }
}

/**
 * probs[g × ctx + j] = softmax over j of scoresT[j × stride + g], by the softmax of
 * wasm-softmax.ts (as prefill attention and the native kernel compute it).
 */
function softmaxColumns(
  rt: WasmRuntime,
  scoresT: number,
  stride: number,
  probs: number,
  group: number,
  ctx: number,
): void {
  const mem = rt.f32;
  for (let g = 0; g < group; g++) {
    const row = probs + g * ctx;
    for (let j = 0, s = scoresT + g; j < ctx; j++, s += stride) mem[row + j] = mem[s] as number;
    rt.softmax(row, ctx);
  }
}

/** Copies the K and V rows of positions [lo, hi] into scratch.keys / scratch.values. */
function copyContext(
  rt: WasmRuntime,
  layer: LayerKV,
  scratch: DecodeScratch,
  table: readonly number[],
  lo: number,
  hi: number,
): void {
  const mem = rt.f32;
  const rs = layer.rowSize;
  const bs = layer.blockSize;
  const vShift = bs * rs;
  const src = layer.f32;
  if (src === null) {
    for (let p = lo; p <= hi; p++) {
      const k = kRowOffset(layer, table, p);
      const dst = (p - lo) * rs;
      for (let i = 0; i < rs; i++) {
        mem[scratch.keys + dst + i] = readElement(layer, k + i);
        mem[scratch.values + dst + i] = readElement(layer, k + vShift + i);
      }
    }
    return;
  }
  forEachBlockRun(table, bs, rs, lo, hi, (from, j0, n) => {
    const count = n * rs;
    const dst = (j0 - lo) * rs;
    mem.set(src.subarray(from, from + count), scratch.keys + dst);
    mem.set(src.subarray(from + vShift, from + vShift + count), scratch.values + dst);
  });
}
