/**
 * A small seeded PRNG (xoshiro128**, seeded through splitmix32). Only integer and basic
 * float arithmetic, so every machine produces the same stream for the same seed.
 */
export class SeededRandom {
  #s0: number;
  #s1: number;
  #s2: number;
  #s3: number;

  constructor(seed: number) {
    let x = seed >>> 0;
    const next = (): number => {
      x = (x + 0x9e3779b9) >>> 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.#s0 = next();
    this.#s1 = next();
    this.#s2 = next();
    this.#s3 = next() | 1;
  }

  /** Uniform 32-bit unsigned integer. */
  nextUint32(): number {
    const result = Math.imul(rotl(Math.imul(this.#s1, 5), 7), 9) >>> 0;
    const t = this.#s1 << 9;
    this.#s2 ^= this.#s0;
    this.#s3 ^= this.#s1;
    this.#s1 ^= this.#s2;
    this.#s0 ^= this.#s3;
    this.#s2 ^= t;
    this.#s3 = rotl(this.#s3, 11);
    return result;
  }

  /** Uniform in [0, 1). */
  nextFloat(): number {
    return this.nextUint32() / 4294967296;
  }

  /**
   * Approximately standard normal: a sum of four uniforms rescaled to unit variance
   * (Irwin–Hall). No transcendental functions, so results are bit-identical everywhere.
   */
  nextGaussian(): number {
    const s = this.nextFloat() + this.nextFloat() + this.nextFloat() + this.nextFloat();
    return (s - 2) * 1.7320508075688772;
  }

  /**
   * Fills `out` with `mean + std * nextGaussian()` (just `std * nextGaussian()` when mean is
   * 0), element by element: the same values as that loop, with the generator state held in
   * locals rather than read and written through fields for every draw (model weights are
   * millions of draws).
   */
  fillGaussian(out: Float32Array, std: number, mean = 0): void {
    let s0 = this.#s0;
    let s1 = this.#s1;
    let s2 = this.#s2;
    let s3 = this.#s3;
    for (let i = 0; i < out.length; i++) {
      let sum = 0;
      for (let k = 0; k < 4; k++) {
        const x = Math.imul(s1, 5);
        const result = Math.imul((x << 7) | (x >>> 25), 9) >>> 0;
        const t = s1 << 9;
        s2 ^= s0;
        s3 ^= s1;
        s1 ^= s2;
        s0 ^= s3;
        s2 ^= t;
        s3 = (s3 << 11) | (s3 >>> 21);
        sum += result / 4294967296;
      }
      const g = std * ((sum - 2) * 1.7320508075688772);
      out[i] = mean === 0 ? g : mean + g;
    }
    this.#s0 = s0;
    this.#s1 = s1;
    this.#s2 = s2;
    this.#s3 = s3;
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}
