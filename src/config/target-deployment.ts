/**
 * The deployment an emulating server stands in for (docs/emulation.md): a model
 * shape — built in, or read from a HF config.json — and an accelerator's datasheet figures
 * with the fractions of them a serving engine achieves, calibrated to the published
 * reference ranges (see the doc for sources and limits).
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { configError } from './config-error.ts';

/** What the roofline needs of a decoder-only transformer (dense, SwiGLU MLP, GQA attention). */
export interface ModelShape {
  name: string;
  numLayers: number;
  hiddenSize: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  intermediateSize: number;
  vocabSize: number;
  tieWordEmbeddings: boolean;
  /** Bytes per weight and per KV element (2: BF16). */
  dtypeBytes: number;
}

/** The shapes of the public config.json files of these models. */
export const BUILTIN_TARGET_MODELS: Record<string, ModelShape> = {
  'llama-3.1-8b': shape('llama-3.1-8b', 32, 4096, 32, 8, 128, 14336, 128256, false),
  'llama-3.1-70b': shape('llama-3.1-70b', 80, 8192, 64, 8, 128, 28672, 128256, false),
  'qwen3-32b': shape('qwen3-32b', 64, 5120, 64, 8, 128, 25600, 151936, false),
  'mistral-7b': shape('mistral-7b', 32, 4096, 32, 8, 128, 14336, 32768, false),
};

function shape(
  name: string,
  numLayers: number,
  hiddenSize: number,
  numHeads: number,
  numKvHeads: number,
  headDim: number,
  intermediateSize: number,
  vocabSize: number,
  tieWordEmbeddings: boolean,
): ModelShape {
  return {
    name,
    numLayers,
    hiddenSize,
    numHeads,
    numKvHeads,
    headDim,
    intermediateSize,
    vocabSize,
    tieWordEmbeddings,
    dtypeBytes: 2,
  };
}

export interface Accelerator {
  name: string;
  /** Dense BF16 tensor throughput, TFLOP/s (datasheet, no sparsity). */
  denseBf16Tflops: number;
  /** HBM bandwidth, GB/s (datasheet). */
  hbmGBs: number;
  /** Achieved share of peak compute on a prefill of a few hundred tokens in a serving engine. */
  prefillComputeFraction: number;
  /** Achieved share of peak compute on decode batches. */
  decodeComputeFraction: number;
  /** Achieved share of HBM bandwidth when streaming weights and KV. */
  bandwidthFraction: number;
  /** Latency of one small all-reduce across the tensor-parallel group (µs). */
  allReduceLatencyUs: number;
  /** Per-direction GPU-to-GPU bandwidth for all-reduce payloads (GB/s). */
  linkGBs: number;
}

/**
 * Datasheet figures: NVIDIA H100 SXM5, H200 SXM, B200 (HGX), A100 SXM4 80GB, L40S; AMD
 * Instinct MI300X. The fractions of H100, A100, L40S and MI300X are fitted to the reference
 * ranges (docs/emulation.md); H200 and B200 have no reference row and reuse H100's.
 */
export const ACCELERATORS: Record<string, Accelerator> = {
  h100: accel('h100', 989, 3350, 0.06, 0.5, 0.7, 34, 450),
  h200: accel('h200', 989, 4800, 0.06, 0.5, 0.7, 34, 450),
  b200: accel('b200', 2250, 8000, 0.06, 0.5, 0.7, 30, 900),
  a100: accel('a100', 312, 2039, 0.104, 0.5, 0.7, 45, 300),
  l40s: accel('l40s', 362, 864, 0.049, 0.5, 0.8, 60, 32),
  mi300x: accel('mi300x', 1307, 5300, 0.059, 0.5, 0.4, 34, 448),
};

function accel(
  name: string,
  denseBf16Tflops: number,
  hbmGBs: number,
  prefillComputeFraction: number,
  decodeComputeFraction: number,
  bandwidthFraction: number,
  allReduceLatencyUs: number,
  linkGBs: number,
): Accelerator {
  return {
    name,
    denseBf16Tflops,
    hbmGBs,
    prefillComputeFraction,
    decodeComputeFraction,
    bandwidthFraction,
    allReduceLatencyUs,
    linkGBs,
  };
}

/** A built-in shape by name, or the shape in a config.json (a file, or a directory holding one). */
export function resolveTargetModel(model: string, cwd = process.cwd()): ModelShape {
  const builtin = BUILTIN_TARGET_MODELS[model];
  if (builtin) return builtin;
  const path = resolve(cwd, model);
  const file = existsSync(path) && statSync(path).isDirectory() ? join(path, 'config.json') : path;
  if (!existsSync(file)) {
    throw configError(
      'target-model',
      `a built-in model shape (${Object.keys(BUILTIN_TARGET_MODELS).join(', ')}) or a config.json`,
      model,
      'Pass --target-model llama-3.1-8b, or the path of a HF config.json (or of its directory).',
    );
  }
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  } catch (e) {
    throw configError(
      'target-model',
      'a readable JSON config.json',
      file,
      `Fix ${file}: ${(e as Error).message}`,
    );
  }
  const int = (key: string, fallback?: number): number => {
    const v = raw[key] ?? fallback;
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) {
      throw configError(
        `target-model.${key}`,
        'a positive integer',
        v,
        `${file} must give ${key} (a dense decoder-only config.json, e.g. Llama's).`,
      );
    }
    return v;
  };
  const hiddenSize = int('hidden_size');
  const numHeads = int('num_attention_heads');
  return {
    name: file,
    numLayers: int('num_hidden_layers'),
    hiddenSize,
    numHeads,
    numKvHeads: int('num_key_value_heads', numHeads),
    headDim: int('head_dim', Math.floor(hiddenSize / numHeads)),
    intermediateSize: int('intermediate_size'),
    vocabSize: int('vocab_size'),
    tieWordEmbeddings: raw.tie_word_embeddings === true,
    dtypeBytes: 2,
  };
}

export function resolveAccelerator(name: string): Accelerator {
  const a = ACCELERATORS[name];
  if (!a) {
    throw configError(
      'target-accelerator',
      `one of ${Object.keys(ACCELERATORS).join(', ')}`,
      name,
      'Pass --target-accelerator h100 (or h200, b200, a100, l40s, mi300x).',
    );
  }
  return a;
}

/** KV bytes one token occupies over all layers: 2 (K, V) × layers × KV heads × head_dim × dtype. */
export function kvBytesPerToken(m: ModelShape): number {
  return 2 * m.numLayers * m.numKvHeads * m.headDim * m.dtypeBytes;
}

/** An interconnect between prefill and decode servers: effective bandwidth and setup latency. */
export interface KvLink {
  name: string;
  bandwidthGBs: number;
  latencyUs: number;
}

/**
 * Effective bandwidths and setup overheads of llm-d-inference-sim's KV-transfer tables
 * (its latency-profiles page): the bandwidth column as given, the setup latency the
 * middle of its range for the transport (NVLink + shared memory 100–500 µs, RDMA 0.5–2 ms,
 * TCP/Ethernet 2–10 ms).
 */
export const KV_LINKS: Record<string, KvLink> = {
  nvlink: { name: 'nvlink', bandwidthGBs: 600, latencyUs: 300 },
  'ib-ndr': { name: 'ib-ndr', bandwidthGBs: 40, latencyUs: 1000 },
  'roce-200': { name: 'roce-200', bandwidthGBs: 20, latencyUs: 1000 },
  'eth-100': { name: 'eth-100', bandwidthGBs: 10, latencyUs: 5000 },
  'eth-25': { name: 'eth-25', bandwidthGBs: 2.5, latencyUs: 5000 },
};
