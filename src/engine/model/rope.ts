/** Rotary position embedding (HF Llama rotate_half convention) with cached cos/sin tables. */
export class RopeTable {
  private readonly half: number;
  private readonly invFreq: Float64Array;
  private cos = new Float32Array(0);
  private sin = new Float32Array(0);
  private positions = 0;

  constructor(headDim: number, theta: number) {
    this.half = headDim / 2;
    this.invFreq = new Float64Array(this.half);
    for (let i = 0; i < this.half; i++) this.invFreq[i] = theta ** (-(2 * i) / headDim);
  }

  /** Makes positions [0, n) available. */
  ensure(n: number): void {
    if (n <= this.positions) return;
    const size = Math.max(n, this.positions * 2, 256);
    const cos = new Float32Array(size * this.half);
    const sin = new Float32Array(size * this.half);
    for (let p = 0; p < size; p++) {
      for (let i = 0; i < this.half; i++) {
        const angle = p * (this.invFreq[i] as number);
        cos[p * this.half + i] = Math.cos(angle);
        sin[p * this.half + i] = Math.sin(angle);
      }
    }
    this.cos = cos;
    this.sin = sin;
    this.positions = size;
  }

  /** Rotates one head vector at `offset` of `mem` in place. */
  apply(mem: Float32Array, offset: number, position: number): void {
    const half = this.half;
    const base = position * half;
    for (let i = 0; i < half; i++) {
      const c = this.cos[base + i] as number;
      const s = this.sin[base + i] as number;
      const x1 = mem[offset + i] as number;
      const x2 = mem[offset + i + half] as number;
      mem[offset + i] = x1 * c - x2 * s;
      mem[offset + i + half] = x2 * c + x1 * s;
    }
  }
}
