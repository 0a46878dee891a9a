/**
 * Plain TypeScript reference implementations of every model op: the test oracle for the
 * fast paths. Written for clarity, not speed. Matrices are row-major Float32Arrays.
 */

/** C[M,N] = A[M,K] · B[K,N]. */
export function matmulRef(a: Float32Array, b: Float32Array, m: number, n: number, k: number): Float32Array {
  const c = new Float32Array(m * n);
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let s = 0;
      for (let p = 0; p < k; p++) s += (a[i * k + p] as number) * (b[p * n + j] as number);
      c[i * n + j] = s;
    }
  }
  return c;
}

/** y = x · W^T for a HF Linear weight W of shape [out, in]. */
export function linearRef(
  x: Float32Array,
  w: Float32Array,
  rows: number,
  inDim: number,
  outDim: number,
): Float32Array {
  const y = new Float32Array(rows * outDim);
  for (let r = 0; r < rows; r++) {
    for (let o = 0; o < outDim; o++) {
      let s = 0;
      for (let i = 0; i < inDim; i++) s += (x[r * inDim + i] as number) * (w[o * inDim + i] as number);
      y[r * outDim + o] = s;
    }
  }
  return y;
}

/** Row-wise RMSNorm: x / sqrt(mean(x²) + eps) * weight. */
export function rmsnormRef(
  x: Float32Array,
  weight: Float32Array,
  rows: number,
  dim: number,
  eps: number,
): Float32Array {
  const y = new Float32Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    let ss = 0;
    for (let i = 0; i < dim; i++) ss += (x[r * dim + i] as number) ** 2;
    const inv = 1 / Math.sqrt(ss / dim + eps);
    for (let i = 0; i < dim; i++) y[r * dim + i] = (x[r * dim + i] as number) * inv * (weight[i] as number);
  }
  return y;
}

/** HF Llama rotary embedding (rotate_half) of one head vector in place, at `position`. */
export function ropeRef(vec: Float32Array, offset: number, invFreq: Float32Array, position: number): void {
  const half = invFreq.length;
  for (let i = 0; i < half; i++) {
    const angle = position * (invFreq[i] as number);
    const cos = Math.cos(angle);
    const sin = Math.sin(angle);
    const x1 = vec[offset + i] as number;
    const x2 = vec[offset + i + half] as number;
    vec[offset + i] = x1 * cos - x2 * sin;
    vec[offset + i + half] = x2 * cos + x1 * sin;
  }
}

export function softmaxRef(x: Float32Array): Float32Array {
  let max = Number.NEGATIVE_INFINITY;
  for (const v of x) max = Math.max(max, v);
  const y = new Float32Array(x.length);
  let sum = 0;
  for (let i = 0; i < x.length; i++) {
    const e = Math.exp((x[i] as number) - max);
    y[i] = e;
    sum += e;
  }
  for (let i = 0; i < y.length; i++) y[i] = (y[i] as number) / sum;
  return y;
}

export function siluRef(x: number): number {
  return x / (1 + Math.exp(-x));
}

/**
 * Attention of one query vector over keys/values [n, headDim] (contiguous), restricted
 * to key indices in [lo, hi]. Returns the output vector.
 */
export function attentionRef(
  q: Float32Array,
  keys: Float32Array,
  values: Float32Array,
  headDim: number,
  lo: number,
  hi: number,
): Float32Array {
  const scale = 1 / Math.sqrt(headDim);
  const scores = new Float32Array(hi - lo + 1);
  for (let k = lo; k <= hi; k++) {
    let s = 0;
    for (let d = 0; d < headDim; d++) s += (q[d] as number) * (keys[k * headDim + d] as number);
    scores[k - lo] = s * scale;
  }
  const p = softmaxRef(scores);
  const out = new Float32Array(headDim);
  for (let k = lo; k <= hi; k++) {
    const w = p[k - lo] as number;
    for (let d = 0; d < headDim; d++) out[d] = (out[d] as number) + w * (values[k * headDim + d] as number);
  }
  return out;
}
