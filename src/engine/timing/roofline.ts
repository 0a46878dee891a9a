/**
 * `--latency-calculator roofline`: a step's duration from the batch the scheduler actually ran
 * on a target deployment (model shape × accelerator × tensor-parallel size), per GPU:
 *
 *   compute = (2 × params × prefill tokens + attention FLOPs) / (peak × prefill fraction × TP efficiency)
 *           + (2 × params × decode tokens + attention FLOPs) / (peak × decode fraction)
 *   memory  = (weights + KV read + KV written) / (HBM bandwidth × bandwidth fraction)
 *   step    = max(compute, memory) + step overhead + per-layer overhead × layers
 *           + all-reduces (2 per layer when TP > 1) + prefill overhead (a step that starts a prefill)
 *
 * Everything scales per GPU (weights, KV heads and FLOPs divided by TP). The constants are
 * calibrated in docs/emulation.md; no factor depends on load: queueing, batching and
 * preemption come from the real scheduler.
 */
import type { RooflineTarget } from '../../config/emulation-config.ts';
import {
  type Accelerator,
  kvBytesPerToken,
  type ModelShape,
  resolveAccelerator,
  resolveTargetModel,
} from '../../config/target-deployment.ts';
import type { StepBatch, StepTimeModel } from './step-batch.ts';

/** Engine costs per step (scheduling, launches) and per prefill, ms. */
export const STEP_OVERHEAD_MS = 2;
export const LAYER_OVERHEAD_MS = 0.1;
export const PREFILL_LAYER_OVERHEAD_MS = 0.75;
/** Compute efficiency lost per extra tensor-parallel rank on prefill (1 / (1 + k × (TP − 1))). */
export const TP_PREFILL_PENALTY = 0.1;

/** Parameters of the matmuls every token runs through (no embedding lookup, no LM head). */
export function layerParams(m: ModelShape): number {
  const q = m.hiddenSize * m.numHeads * m.headDim;
  const kv = 2 * m.hiddenSize * m.numKvHeads * m.headDim;
  const o = m.numHeads * m.headDim * m.hiddenSize;
  const mlp = 3 * m.hiddenSize * m.intermediateSize;
  return m.numLayers * (q + kv + o + mlp);
}

export function totalParams(m: ModelShape): number {
  const embeddings = m.vocabSize * m.hiddenSize * (m.tieWordEmbeddings ? 1 : 2);
  return layerParams(m) + embeddings;
}

export class RooflineModel implements StepTimeModel {
  readonly name = 'roofline';
  readonly model: ModelShape;
  readonly accelerator: Accelerator;
  readonly tp: number;
  readonly #weightBytesPerGpu: number;
  readonly #kvBytesPerTokenPerGpu: number;
  readonly #layerParamsPerGpu: number;
  readonly #lmHeadParamsPerGpu: number;

  constructor(model: ModelShape, accelerator: Accelerator, tp: number) {
    this.model = model;
    this.accelerator = accelerator;
    this.tp = tp;
    this.#weightBytesPerGpu = (totalParams(model) * model.dtypeBytes) / tp;
    // KV heads are split over the ranks (replicated when there are fewer heads than ranks).
    this.#kvBytesPerTokenPerGpu = kvBytesPerToken(model) / Math.min(tp, model.numKvHeads);
    this.#layerParamsPerGpu = layerParams(model) / tp;
    this.#lmHeadParamsPerGpu = (model.vocabSize * model.hiddenSize) / tp;
  }

  static fromTarget(target: RooflineTarget): RooflineModel {
    return new RooflineModel(
      resolveTargetModel(target.model),
      resolveAccelerator(target.accelerator),
      target.tensorParallelSize,
    );
  }

  stepMs(batch: StepBatch): number {
    if (batch.seqs.length === 0) return 0;
    const m = this.model;
    const a = this.accelerator;
    const attnPerPair = (4 * m.numLayers * m.numHeads * m.headDim) / this.tp;
    let prefillFlops = 0;
    let decodeFlops = 0;
    let kvTokensRead = 0;
    let kvTokensWritten = 0;
    let tokens = 0;
    let startsPrefill = false;
    for (const seq of batch.seqs) {
      const n = seq.numNewTokens;
      const c = seq.contextBefore;
      tokens += n;
      // Causal attention: token i of the chunk attends to c + i + 1 positions.
      const pairs = n * c + (n * (n + 1)) / 2;
      const sampled = seq.firstToken || seq.decode ? 1 : 0;
      const flops =
        2 * this.#layerParamsPerGpu * n + attnPerPair * pairs + 2 * this.#lmHeadParamsPerGpu * sampled;
      if (seq.decode && n === 1) decodeFlops += flops;
      else prefillFlops += flops;
      if (seq.firstChunk && !seq.remotePrefill) startsPrefill = true;
      kvTokensRead += c + n;
      kvTokensWritten += n;
    }
    const peak = a.denseBf16Tflops * 1e12;
    const tpEfficiency = 1 / (1 + TP_PREFILL_PENALTY * (this.tp - 1));
    const computeS =
      prefillFlops / (peak * a.prefillComputeFraction * tpEfficiency) +
      decodeFlops / (peak * a.decodeComputeFraction);
    const bytes = this.#weightBytesPerGpu + (kvTokensRead + kvTokensWritten) * this.#kvBytesPerTokenPerGpu;
    const memoryS = bytes / (a.hbmGBs * 1e9 * a.bandwidthFraction);
    let ms = Math.max(computeS, memoryS) * 1e3 + STEP_OVERHEAD_MS + LAYER_OVERHEAD_MS * m.numLayers;
    if (this.tp > 1) {
      // Two all-reduces of the activations per layer: latency plus a ring's 2 (TP-1)/TP payload.
      const payload = tokens * m.hiddenSize * m.dtypeBytes;
      const perAllReduceS =
        a.allReduceLatencyUs * 1e-6 + (2 * (this.tp - 1) * payload) / this.tp / (a.linkGBs * 1e9);
      ms += 2 * m.numLayers * perAllReduceS * 1e3;
    }
    if (startsPrefill) ms += PREFILL_LAYER_OVERHEAD_MS * m.numLayers;
    return ms;
  }
}
