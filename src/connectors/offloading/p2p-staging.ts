/**
 * The p2p tier's staging region: `numBlocks` blocks of `blockLen` bytes (one chunk of one KV
 * cache group each), registered with the transfer agent. A producer copies the chunks it
 * keeps for a remote decoder into blocks of it and WRITEs them from there; a consumer
 * grants blocks of it to the producer and reads the chunks out when the WRITE is done.
 * (vLLM registers its whole CPU tier with NIXL instead; kvconnect's CPU tier is not one
 * contiguous region.)
 */
export class P2PStaging {
  readonly blockLen: number;
  readonly numBlocks: number;
  readonly bytes: Uint8Array;
  readonly #free: number[];

  constructor(blockLen: number, numBlocks: number) {
    this.blockLen = blockLen;
    this.numBlocks = numBlocks;
    this.bytes = new Uint8Array(blockLen * numBlocks);
    // Popped from the end: block 0 first.
    this.#free = Array.from({ length: numBlocks }, (_, i) => numBlocks - 1 - i);
  }

  get used(): number {
    return this.numBlocks - this.#free.length;
  }

  /** `n` free blocks, or null (nothing taken) when fewer are free. */
  take(n: number): number[] | null {
    if (n > this.#free.length) return null;
    return this.#free.splice(this.#free.length - n, n).reverse();
  }

  give(blocks: Iterable<number>): void {
    for (const b of blocks) this.#free.push(b);
  }

  view(block: number, length = this.blockLen): Uint8Array {
    const start = block * this.blockLen;
    return this.bytes.subarray(start, start + length);
  }
}
