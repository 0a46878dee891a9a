/**
 * llm-d-inference-sim's latency calculators (`constant`, `per-token` and its legacy `""`),
 * with its formulas, load factor, jitter and whole-millisecond quantization, applied to the
 * steps of a real scheduler: each request in a step gets the time the sim would give it —
 * prefill (or, on a P/D decode server, KV transfer) when the step samples its first token,
 * inter-token latency when it samples a further one — and the step lasts as long as its
 * slowest request. At batch 1 this is exactly the sim's TTFT and ITL.
 */
import type { LatencyCalculatorName, SimLatency } from '../../config/emulation-config.ts';
import { mulberry32 } from '../../util/mulberry32.ts';
import type { ScheduledSeq, StepBatch, StepTimeModel } from './step-batch.ts';

const NS_PER_MS = 1e6;

/**
 * The sim's RandomNormDuration: mean and std-dev truncated to whole milliseconds, a normal
 * sample clamped to [0.3, 1.7] × mean, truncated to whole milliseconds. Returns ms.
 */
export function randomNormMs(meanNs: number, stdNs: number, normal: () => number): number {
  const mean = Math.trunc(meanNs / NS_PER_MS);
  const std = Math.trunc(stdNs / NS_PER_MS);
  let value = std === 0 ? mean : normal() * std + mean;
  if (value < 0.3 * mean) value = 0.3 * mean;
  else if (value > 1.7 * mean) value = 1.7 * mean;
  return Math.trunc(value);
}

/** Standard normal samples from a seeded uniform generator (Box–Muller). */
export function seededNormal(seed: number): () => number {
  const uniform = mulberry32(seed);
  return () => {
    const u = 1 - uniform(); // (0, 1]
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * uniform());
  };
}

/** The sim's load factor: 1 at one running request, time-factor-under-load at max-num-seqs. */
export function loadFactor(timeFactorUnderLoad: number, running: number, maxNumSeqs: number): number {
  if (maxNumSeqs <= 1) return 1;
  return 1 + ((timeFactorUnderLoad - 1) * (running - 1)) / (maxNumSeqs - 1);
}

export class SimLatencyModel implements StepTimeModel {
  readonly name: string;
  readonly #p: SimLatency;
  readonly #calculator: Exclude<LatencyCalculatorName, 'roofline'>;
  readonly #normal: () => number;

  constructor(calculator: Exclude<LatencyCalculatorName, 'roofline'>, params: SimLatency, seed = 0) {
    this.#calculator = calculator;
    this.#p = params;
    this.#normal = seededNormal(seed);
    this.name = calculator === '' ? 'sim-default' : calculator;
  }

  stepMs(batch: StepBatch): number {
    const running = batch.seqs.length;
    if (running === 0) return 0;
    const factor = loadFactor(this.#p.timeFactorUnderLoad, running, batch.maxNumSeqs);
    let ms = 0;
    let decodes = false;
    for (const seq of batch.seqs) {
      if (seq.decode) decodes = true;
      else ms = Math.max(ms, this.#prefillMs(seq, factor));
    }
    // One inter-token sample per step: every decoding sequence advances by one token.
    if (decodes) ms = Math.max(ms, this.interTokenMs(factor));
    return ms;
  }

  interTokenMs(factor: number): number {
    const p = this.#p;
    return randomNormMs(Math.trunc(p.interTokenLatency * factor), p.interTokenLatencyStdDev, this.#normal);
  }

  /** Time to first token of a request that prefilled here or, with remotePrefill, received its KV. */
  #prefillMs(seq: ScheduledSeq, factor: number): number {
    const p = this.#p;
    if (seq.remotePrefill) {
      if (!seq.firstToken) return 0;
      // Network-bound: not scaled by the load factor; the whole prompt travels.
      const constant =
        this.#calculator === 'constant' ||
        (this.#calculator === '' && (p.kvCacheTransferLatency !== 0 || p.kvCacheTransferLatencyStdDev !== 0));
      return constant
        ? randomNormMs(p.kvCacheTransferLatency, p.kvCacheTransferLatencyStdDev, this.#normal)
        : randomNormMs(
            p.kvCacheTransferTimePerToken * seq.numPromptTokens,
            p.kvCacheTransferTimeStdDev,
            this.#normal,
          );
    }
    const constant =
      this.#calculator === 'constant' ||
      (this.#calculator === '' && (p.timeToFirstToken !== 0 || p.timeToFirstTokenStdDev !== 0));
    if (constant) {
      // A flat TTFT, charged on the step that completes the prompt (earlier chunks are free).
      if (!seq.firstToken) return 0;
      return randomNormMs(Math.trunc(p.timeToFirstToken * factor), p.timeToFirstTokenStdDev, this.#normal);
    }
    // per-token: overhead once, then every uncached prompt token this step computed.
    const overhead = seq.firstChunk ? Math.trunc(p.prefillOverhead * factor) : 0;
    const perToken = Math.trunc(p.prefillTimePerToken * factor);
    return randomNormMs(overhead + seq.numNewTokens * perToken, p.prefillTimeStdDev, this.#normal);
  }
}
