/**
 * Tensor-parallel all-reduce between worker threads over SharedArrayBuffer + Atomics.
 *
 * Every rank copies its partial vector into its own slot, meets the others at a barrier,
 * then sums all slots in rank order. Summing in the same order on every rank makes the
 * result bit-identical everywhere, so every rank computes the same logits and samples the
 * same tokens without a broadcast. Two slot regions alternate between calls: the barrier
 * of call k+1 guarantees every rank finished reading call k before region k%2 is reused,
 * so one barrier per call suffices.
 */

export interface AllReduceBuffers {
  /** Barrier state: [arrived count, generation]. */
  control: SharedArrayBuffer;
  /** 2 regions × tpSize slots × capacity float32 values. */
  data: SharedArrayBuffer;
  tpSize: number;
  capacity: number;
}

/** Default slot size in float32 elements (4 MiB per slot); larger vectors go in chunks. */
export const DEFAULT_ALL_REDUCE_CAPACITY = 1 << 20;

export function createAllReduceBuffers(
  tpSize: number,
  capacity = DEFAULT_ALL_REDUCE_CAPACITY,
): AllReduceBuffers {
  return {
    control: new SharedArrayBuffer(2 * Int32Array.BYTES_PER_ELEMENT),
    data: new SharedArrayBuffer(2 * tpSize * capacity * Float32Array.BYTES_PER_ELEMENT),
    tpSize,
    capacity,
  };
}

export class SharedMemoryAllReduce {
  readonly #control: Int32Array;
  readonly #regions: Float32Array[][];
  readonly #rank: number;
  readonly #tpSize: number;
  readonly #capacity: number;
  #call = 0;

  constructor(buffers: AllReduceBuffers, rank: number) {
    this.#control = new Int32Array(buffers.control);
    this.#rank = rank;
    this.#tpSize = buffers.tpSize;
    this.#capacity = buffers.capacity;
    this.#regions = [0, 1].map((region) =>
      Array.from(
        { length: buffers.tpSize },
        (_, r) =>
          new Float32Array(
            buffers.data,
            (region * buffers.tpSize + r) * buffers.capacity * 4,
            buffers.capacity,
          ),
      ),
    );
  }

  /** Sums `x` in place over all ranks. Every rank must call with the same length. */
  allReduce(x: Float32Array): void {
    if (this.#tpSize === 1) return;
    for (let offset = 0; offset < x.length; offset += this.#capacity) {
      const chunk = x.subarray(offset, Math.min(x.length, offset + this.#capacity));
      this.#reduceChunk(chunk);
    }
  }

  #reduceChunk(chunk: Float32Array): void {
    const slots = this.#regions[this.#call & 1] as Float32Array[];
    this.#call++;
    (slots[this.#rank] as Float32Array).set(chunk);
    this.#barrier();
    const n = chunk.length;
    chunk.set((slots[0] as Float32Array).subarray(0, n));
    for (let r = 1; r < this.#tpSize; r++) {
      const slot = slots[r] as Float32Array;
      for (let i = 0; i < n; i++) chunk[i] = (chunk[i] as number) + (slot[i] as number);
    }
  }

  /** Generation barrier: the last rank to arrive resets the count and wakes the others. */
  #barrier(): void {
    const generation = Atomics.load(this.#control, 1);
    if (Atomics.add(this.#control, 0, 1) === this.#tpSize - 1) {
      Atomics.store(this.#control, 0, 0);
      Atomics.add(this.#control, 1, 1);
      Atomics.notify(this.#control, 1);
      return;
    }
    while (Atomics.load(this.#control, 1) === generation) Atomics.wait(this.#control, 1, generation);
  }
}
