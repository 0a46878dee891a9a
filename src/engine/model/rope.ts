/**
 * Rotary position embedding (HF Llama rotate_half convention) with cached cos/sin tables.
 * Frequencies, angles and cos/sin are rounded to float32 after every operation, in the
 * order HF transformers (and vLLM) compute them in float32 tensors, so the engine's
 * positions match a PyTorch run of the same checkpoint to the last bit or two.
 */
import type { RopeScaling } from '../../config/hf-model-config.ts';
import type { WasmRuntime } from './kernels/wasm-matmul.ts';

const f32 = Math.fround;

/** Inverse frequencies of the `headDim / 2` rotary pairs (HF's ROPE_INIT_FUNCTIONS). */
export function ropeInvFreq(headDim: number, theta: number, scaling: RopeScaling): Float32Array {
  const half = headDim / 2;
  const inv = new Float32Array(half);
  for (let i = 0; i < half; i++) inv[i] = f32(1 / f32(f32(theta) ** f32((2 * i) / headDim)));
  if (scaling.ropeType === 'linear') {
    for (let i = 0; i < half; i++) inv[i] = f32((inv[i] as number) / f32(scaling.factor));
  } else if (scaling.ropeType === 'llama3') {
    const {
      factor,
      lowFreqFactor: low,
      highFreqFactor: high,
      originalMaxPositionEmbeddings: oldLen,
    } = scaling;
    const lowWavelen = f32(oldLen / low);
    const highWavelen = f32(oldLen / high);
    for (let i = 0; i < half; i++) {
      const freq = inv[i] as number;
      const wavelen = f32(f32(2 * Math.PI) / freq);
      // Long wavelengths are divided by factor, short ones kept, the band between blended.
      const scaled = wavelen > lowWavelen ? f32(freq / f32(factor)) : freq;
      if (wavelen < highWavelen || wavelen > lowWavelen) {
        inv[i] = scaled;
        continue;
      }
      const smooth = f32(f32(f32(f32(oldLen) / wavelen) - f32(low)) / f32(high - low));
      inv[i] = f32(f32(f32(f32(1 - smooth) * scaled) / f32(factor)) + f32(smooth * scaled));
    }
  }
  return inv;
}

export class RopeTable {
  readonly #half: number;
  readonly #invFreq: Float32Array;
  #cos = new Float32Array(0);
  #sin = new Float32Array(0);
  #positions = 0;

  constructor(invFreq: Float32Array) {
    this.#half = invFreq.length;
    this.#invFreq = invFreq;
  }

  /** Makes positions [0, n) available. */
  ensure(n: number): void {
    if (n <= this.#positions) return;
    const size = Math.max(n, this.#positions * 2, 256);
    const cos = new Float32Array(size * this.#half);
    const sin = new Float32Array(size * this.#half);
    for (let p = 0; p < size; p++) {
      for (let i = 0; i < this.#half; i++) {
        const angle = f32(p * (this.#invFreq[i] as number));
        cos[p * this.#half + i] = Math.cos(angle);
        sin[p * this.#half + i] = Math.sin(angle);
      }
    }
    this.#cos = cos;
    this.#sin = sin;
    this.#positions = size;
  }

  /**
   * Rotates `heads` consecutive head vectors of each of `rows` rows of `rt`'s memory (row r at
   * float offset x + r · stride, at position positions[r]); natively where `rt` has it.
   */
  applyRows(
    rt: WasmRuntime,
    x: number,
    stride: number,
    rows: number,
    positions: Int32Array,
    heads: number,
  ): void {
    const half = this.#half;
    if (rt.nativeOps) {
      rt.rope(this.#cos, this.#sin, positions, half, x, stride, rows, heads);
      return;
    }
    const mem = rt.f32;
    for (let r = 0; r < rows; r++) {
      for (let h = 0; h < heads; h++) this.apply(mem, x + r * stride + h * 2 * half, positions[r] as number);
    }
  }

  /** Rotates one head vector at `offset` of `mem` in place. */
  apply(mem: Float32Array, offset: number, position: number): void {
    const half = this.#half;
    const base = position * half;
    for (let i = 0; i < half; i++) {
      const c = this.#cos[base + i] as number;
      const s = this.#sin[base + i] as number;
      const x1 = mem[offset + i] as number;
      const x2 = mem[offset + i + half] as number;
      mem[offset + i] = x1 * c - x2 * s;
      mem[offset + i + half] = x2 * c + x1 * s;
    }
  }
}
