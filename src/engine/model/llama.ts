/**
 * A Llama-family decoder on CPU: embedding → per layer (RMSNorm, q/k/v, RoPE, paged
 * attention, o_proj, residual, RMSNorm, SwiGLU MLP, residual) → final norm → LM head.
 * All projections run on the WASM SIMD matmul (or the native one, on `threads` threads),
 * with weights in `dtype` and float32 activations and accumulation; one instance holds one
 * tensor-parallel rank's shard and must not run two forwards at once.
 */
import { attentionLayerName } from '../../config/model-presets.ts';
import type { ModelDtype } from '../../config/types.ts';
import { KVError } from '../../errors/index.ts';
import type { PagedKVMemory } from '../../kv/interfaces.ts';
import { LoraAdapterCache } from '../lora/adapter-cache.ts';
import { addLoraDelta, type RankLora, type RankLoraPair } from '../lora/rank-lora.ts';
import { type AttentionShape, allocAttentionScratch, pagedAttention } from './attention.ts';
import { allocDecodeScratch, pagedDecodeAttention } from './decode-attention.ts';
import type { ModelDims, RankShard } from './dims.ts';
import { type ForwardBatch, type ForwardHooks, type ForwardModel, logitsRows } from './forward-batch.ts';
import { WasmRuntime, type WeightDtype } from './kernels/wasm-matmul.ts';
import { type PackedWeights, packWeights, tensorDtype } from './packed-weights.ts';
import { kRowOffset, type LayerKV, layerKV, writeRow } from './paged-kv.ts';
import { RopeTable, ropeInvFreq } from './rope.ts';
import { expectedTensorShapes, type TensorMap } from './weights.ts';

/**
 * Default of LlamaModel.decodeAttentionMaxTokens: sequences with at most this many new
 * tokens use the block-copy decode attention (decode-attention.ts); longer ones the
 * query-blocked prefill attention (attention.ts).
 */
export const DECODE_ATTENTION_MAX_TOKENS = 4;

export interface LlamaModelOptions {
  /**
   * The element type of the weights (default auto: each as the checkpoint stores it; a
   * generated preset is float32). A half type rounds float32 weights once, at load.
   */
  dtype?: ModelDtype;
  /** Threads of one forward's matmuls (default 1); the logits do not depend on it. */
  threads?: number;
}

export class LlamaModel implements ForwardModel {
  readonly dims: ModelDims;
  readonly shard: RankShard;
  readonly layerNames: readonly string[];
  /** The weights' dtype (auto resolved; float32 when a checkpoint mixes dtypes). */
  readonly dtype: WeightDtype;
  readonly #rt: WasmRuntime;
  readonly #w: PackedWeights;
  readonly #rope: RopeTable;
  readonly #weightBytes: number;
  /** The LoRA adapters this rank holds; a sequence names its adapter in the forward batch. */
  readonly loras: LoraAdapterCache;
  /** 0 sends every sequence through the prefill attention (the benchmark's baseline). */
  decodeAttentionMaxTokens = DECODE_ATTENTION_MAX_TOKENS;
  /** Each layer's view of the KV memory the last forward used (looked up once per memory). */
  #kvLayers: { kv: PagedKVMemory; layers: LayerKV[] } | null = null;

  constructor(dims: ModelDims, shard: RankShard, tensors: TensorMap, options: LlamaModelOptions = {}) {
    this.dims = dims;
    this.shard = shard;
    const modelDtype = options.dtype ?? 'auto';
    const matrices = [...expectedTensorShapes(dims)]
      .filter(([, shape]) => shape.length === 2)
      .map(([n]) => n);
    this.dtype = tensorDtype(tensors, modelDtype, ...matrices);
    this.layerNames = Array.from({ length: dims.numLayers }, (_, l) => attentionLayerName(l));
    this.#rt = new WasmRuntime(16 << 20);
    this.#rt.threads = options.threads ?? 1;
    this.#w = packWeights(this.#rt, tensors, dims, shard, modelDtype);
    this.#weightBytes = this.#rt.mark() + this.#w.embedding.byteLength;
    this.#rope = new RopeTable(ropeInvFreq(dims.headDim, dims.ropeTheta, dims.ropeScaling));
    this.loras = new LoraAdapterCache(dims, shard);
  }

  /** Bytes the packed weights occupy (projections, LM head, embedding), about half in a half type. */
  get weightBytes(): number {
    return this.#weightBytes;
  }

  /** Threads of one forward's matmuls. */
  get threads(): number {
    return this.#rt.threads;
  }

  set threads(n: number) {
    this.#rt.threads = n;
  }

  get vocabSize(): number {
    return this.dims.vocabSize;
  }

  async forward(batch: ForwardBatch, kv: PagedKVMemory, hooks: ForwardHooks = {}): Promise<Float32Array> {
    const { dims, shard } = this;
    const rt = this.#rt;
    const w = this.#w;
    const h = dims.hiddenSize;
    const hd = dims.headDim;
    const qDim = shard.numHeads * hd;
    const kvDim = shard.numKvHeads * hd;
    const qkvDim = qDim + 2 * kvDim;
    const inter = shard.intermediateSize;
    const rows = batch.tokenIds.length;
    const positions = new Int32Array(rows);
    let maxContext = 1;
    let maxGatherContext = 1;
    let maxDecodeContext = 1;
    let numLogits = 0;
    for (const s of batch.sequences) {
      if (s.start < 0 || s.len < 1 || s.start + s.len > rows) {
        throw new KVError(
          'FORWARD_BATCH_INVALID',
          `Sequence [${s.start}, ${s.start + s.len}) lies outside the ${rows} batch tokens`,
          {
            hint: 'Each sequence needs len ≥ 1 and start + len ≤ tokenIds.length.',
          },
        );
      }
      for (let i = 0; i < s.len; i++) positions[s.start + i] = s.numComputedTokens + i;
      maxContext = Math.max(maxContext, s.numComputedTokens + s.len);
      if (s.len > this.decodeAttentionMaxTokens)
        maxGatherContext = Math.max(maxGatherContext, s.numComputedTokens + s.len);
      else maxDecodeContext = Math.max(maxDecodeContext, s.numComputedTokens + s.len);
      numLogits += logitsRows(s);
    }
    const kvSpec = kv.kvCacheConfig.groups[0]?.spec;
    if (kvSpec === undefined || kvSpec.numKvHeads * kvSpec.headSize !== kvDim) {
      throw new KVError(
        'KV_LAYOUT_MISMATCH',
        `The KV memory holds ${kvSpec?.numKvHeads}×${kvSpec?.headSize} per token, the model rank needs ${shard.numKvHeads}×${hd}`,
        {
          hint: 'Build the KV memory from this model rank (num KV heads per rank × head_dim).',
        },
      );
    }
    this.#rope.ensure(maxContext);
    const kvLayers = this.#layersOf(kv, kvDim);
    const adapters = batch.sequences.map((s) => (s.lora ? this.loras.get(s.lora) : null));
    const anyLora = adapters.some((a) => a !== null);
    /** Adds each adapted sequence's delta of one projection (input x, output out at column col). */
    const lora = (
      l: number,
      target: keyof RankLora['layers'][number],
      x: number,
      xStride: number,
      out: number,
      outStride: number,
    ): void => {
      if (!anyLora) return;
      const f32 = rt.f32;
      batch.sequences.forEach((s, k) => {
        const pair: RankLoraPair | undefined = adapters[k]?.layers[l]?.[target];
        if (pair !== undefined) addLoraDelta(f32, pair, s.start, s.len, x, xStride, out, outStride);
      });
    };
    const mark = rt.mark();
    try {
      const x = rt.alloc(rows * h);
      const hn = rt.alloc(rows * h);
      const qkv = rt.alloc(rows * qkvDim);
      const attn = rt.alloc(rows * qDim);
      const proj = rt.alloc(rows * h);
      const gateUp = rt.alloc(rows * 2 * inter);
      const act = rt.alloc(rows * inter);
      const shape: AttentionShape = {
        numHeads: shard.numHeads,
        numKvHeads: shard.numKvHeads,
        headDim: hd,
        slidingWindow: null,
      };
      const scratch = allocAttentionScratch(rt, shape, maxGatherContext);
      const decodeScratch = allocDecodeScratch(rt, shape, maxDecodeContext);
      const logitsIn = rt.alloc(Math.max(1, numLogits) * h);
      const logitsOut = rt.alloc(Math.max(1, numLogits) * dims.vocabSize);
      let mem = rt.f32;
      for (let r = 0; r < rows; r++) {
        const tok = batch.tokenIds[r] as number;
        if (!(tok >= 0 && tok < dims.vocabSize)) {
          throw new KVError(
            'TOKEN_ID_OUT_OF_RANGE',
            `Token id ${tok} is outside the vocabulary (size ${dims.vocabSize})`,
            {
              hint: 'Use token ids produced by this model’s tokenizer.',
            },
          );
        }
        w.embedding.copyRow(tok, mem, x + r * h);
      }
      const tables32 = batch.sequences.map((s) => s.blockTables.map((t) => Int32Array.from(t)));
      /** The offset of a residual (the last down_proj) not yet added to x, or 0. */
      let pendingAdd = 0;
      for (let l = 0; l < dims.numLayers; l++) {
        const name = this.layerNames[l] as string;
        const lw = w.layers[l];
        if (lw === undefined) break;
        // Awaited only when given: a decode step has no other reason to yield per layer.
        if (hooks.beforeLayer) await hooks.beforeLayer(l, name);
        addRmsnorm(rt, x, pendingAdd, hn, lw.inputNorm, rows, h, dims.rmsNormEps);
        pendingAdd = 0;
        mem = rt.f32;
        rt.matmulWeight(rows, hn, h, lw.qkv, qkv, qkvDim);
        lora(l, 'q_proj', hn, h, qkv, qkvDim);
        lora(l, 'k_proj', hn, h, qkv + qDim, qkvDim);
        lora(l, 'v_proj', hn, h, qkv + qDim + kvDim, qkvDim);
        if (lw.qkvBias !== null) addRowBias(mem, qkv, lw.qkvBias, rows);
        // The K heads follow the Q heads in each row: one run of numHeads + numKvHeads vectors.
        this.#rope.applyRows(rt, qkv, qkvDim, rows, positions, shard.numHeads + shard.numKvHeads);
        mem = rt.f32;
        const layer = kvLayers[l] as LayerKV;
        const vShift = layer.blockSize * kvDim;
        shape.slidingWindow = dims.layerTypes[l] === 'sliding_attention' ? dims.slidingWindow : null;
        for (let k = 0; k < batch.sequences.length; k++) {
          const s = batch.sequences[k] as (typeof batch.sequences)[number];
          const table = s.blockTables[layer.group];
          if (table === undefined) {
            throw new KVError(
              'FORWARD_BATCH_INVALID',
              `Sequence has no block table for KV cache group ${layer.group}`,
              {
                hint: 'Pass one block-id list per KV cache group.',
              },
            );
          }
          for (let i = 0; i < s.len; i++) {
            const r = s.start + i;
            const dst = kRowOffset(layer, table, s.numComputedTokens + i);
            writeRow(layer, dst, mem, qkv + r * qkvDim + qDim, kvDim);
            writeRow(layer, dst + vShift, mem, qkv + r * qkvDim + qDim + kvDim, kvDim);
          }
          const call = {
            qkv,
            qkvStride: qkvDim,
            out: attn,
            firstRow: s.start,
            len: s.len,
            numComputedTokens: s.numComputedTokens,
            blockTable: table,
            blockTable32: tables32[k]?.[layer.group] as Int32Array,
          };
          if (s.len <= this.decodeAttentionMaxTokens)
            pagedDecodeAttention(rt, shape, layer, decodeScratch, call);
          else pagedAttention(rt, shape, layer, scratch, call);
        }
        if (hooks.afterLayer) await hooks.afterLayer(l, name);
        rt.matmulWeight(rows, attn, qDim, lw.o, proj, h);
        lora(l, 'o_proj', attn, qDim, proj, h);
        if (this.shard.tpSize > 1) await this.#reduce(hooks, proj, rows * h);
        addRmsnorm(rt, x, proj, hn, lw.postNorm, rows, h, dims.rmsNormEps);
        rt.matmulWeight(rows, hn, h, lw.gateUp, gateUp, 2 * inter);
        lora(l, 'gate_proj', hn, h, gateUp, 2 * inter);
        lora(l, 'up_proj', hn, h, gateUp + inter, 2 * inter);
        rt.swigluRows(gateUp, act, rows, inter);
        rt.matmulWeight(rows, act, inter, lw.down, proj, h);
        lora(l, 'down_proj', act, inter, proj, h);
        if (this.shard.tpSize > 1) await this.#reduce(hooks, proj, rows * h);
        pendingAdd = proj;
      }
      mem = rt.f32;
      if (pendingAdd !== 0) addInPlace(mem, x, pendingAdd, rows * h);
      let n = 0;
      for (const s of batch.sequences) {
        const count = logitsRows(s);
        if (count === 0) continue;
        const from = s.start + s.len - count;
        mem.copyWithin(logitsIn + n * h, x + from * h, x + (s.start + s.len) * h);
        n += count;
      }
      addRmsnorm(rt, logitsIn, 0, logitsIn, w.finalNorm, n, h, dims.rmsNormEps);
      rt.matmulWeight(n, logitsIn, h, w.lmHead, logitsOut, dims.vocabSize);
      return rt.f32.slice(logitsOut, logitsOut + n * dims.vocabSize);
    } finally {
      rt.release(mark);
    }
  }

  /** Every layer's view of `kv` (cached while the forwards use the same memory). */
  #layersOf(kv: PagedKVMemory, kvDim: number): LayerKV[] {
    if (this.#kvLayers?.kv !== kv) {
      this.#kvLayers = { kv, layers: this.layerNames.map((name) => layerKV(kv, name, kvDim)) };
    }
    return this.#kvLayers.layers;
  }

  /** Tensor parallelism: the all-reduce of one projection's partial sums (tp > 1 only). */
  async #reduce(hooks: ForwardHooks, offset: number, count: number): Promise<void> {
    if (hooks.allReduce === undefined) {
      throw new KVError(
        'TP_ALLREDUCE_MISSING',
        `Rank ${this.shard.tpRank} of ${this.shard.tpSize} needs an allReduce hook`,
        {
          hint: 'Pass hooks.allReduce when tensor_parallel_size > 1.',
        },
      );
    }
    await hooks.allReduce(this.#rt.f32.subarray(offset, offset + count));
  }
}

/**
 * x += add (when add ≠ 0, the residual), then dst = RMSNorm(x) · weight; natively on the
 * matmul's pool where the addon has it, with the same bits.
 */
function addRmsnorm(
  rt: WasmRuntime,
  x: number,
  add: number,
  dst: number,
  weight: Float32Array,
  rows: number,
  dim: number,
  eps: number,
): void {
  if (rt.nativeOps) {
    rt.rmsnorm(weight, eps, x, add, dst, rows, dim);
    return;
  }
  const mem = rt.f32;
  if (add !== 0) addInPlace(mem, x, add, rows * dim);
  for (let r = 0; r < rows; r++) {
    const s = x + r * dim;
    const d = dst + r * dim;
    let ss = 0;
    for (let i = 0; i < dim; i++) {
      const v = mem[s + i] as number;
      ss += v * v;
    }
    const inv = 1 / Math.sqrt(ss / dim + eps);
    for (let i = 0; i < dim; i++) mem[d + i] = (mem[s + i] as number) * inv * (weight[i] as number);
  }
}

function addRowBias(mem: Float32Array, dst: number, bias: Float32Array, rows: number): void {
  const n = bias.length;
  for (let r = 0; r < rows; r++) {
    const d = dst + r * n;
    for (let i = 0; i < n; i++) mem[d + i] = (mem[d + i] as number) + (bias[i] as number);
  }
}

function addInPlace(mem: Float32Array, dst: number, src: number, n: number): void {
  for (let i = 0; i < n; i++) mem[dst + i] = (mem[dst + i] as number) + (mem[src + i] as number);
}
