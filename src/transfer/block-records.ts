/**
 * Block checksums recorded when the engine finished writing the blocks (write tracking).
 *
 * Every transferred block carries the checksum its owner computed (checksum.ts); without a
 * record the owner hashes the block when it sends it (a WRITE) or grants it (a READ). The
 * engine knows better when a block's content is final: a full block is never written again
 * until it is given to other content. It tells the agent so with `recordBlocks` (at the end
 * of the step whose forward pass filled the blocks, see ModelRunner) and `forgetBlocks` (when
 * the blocks are allocated again); a WRITE or grant of recorded blocks then uses these
 * checksums and reads nothing, and the hashing happened earlier, off the transfer's path
 * (on the agent's thread when the agent is threaded).
 *
 * A record that outlives its content cannot corrupt anything: the receiver still checks
 * every block it lands against the checksum sent with it, so a block written after its
 * record fails its check (the transfer fails and names the blocks), it is never accepted.
 * The agent forgets a block's record itself when a transfer lands data in it.
 */
import { blockChecksumsInto, checksumRuns, copyThreadsFor, type HashRun } from './checksum.ts';
import type { MemoryRegion } from './types.ts';

/** [first, count] runs of consecutive ids, ascending, duplicates and invalid ids dropped. */
export function consecutiveRuns(ids: Iterable<number>, limit: number): [number, number][] {
  const sorted = [...new Set(ids)]
    .filter((b) => Number.isInteger(b) && b >= 0 && b < limit)
    .sort((x, y) => x - y);
  const runs: [number, number][] = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i + 1;
    while (j < sorted.length && sorted[j] === sorted[j - 1]! + 1) j++;
    runs.push([sorted[i]!, j - i]);
    i = j;
  }
  return runs;
}

/** fillRecorded()'s answer when every block has a record (shared: a publish is on a WRITE's path). */
const NONE_MISSING: readonly (readonly [number, number])[] = Object.freeze([]);

export class BlockRecords {
  readonly #regions: ReadonlyMap<number, MemoryRegion>;
  /** Per region id: each block's recorded checksum, NaN = none. */
  readonly #sums = new Map<number, Float64Array>();

  /** Threads a large record may hash on (the agent's copyThreads). */
  readonly #threads: number;

  /** `regions` is the agent's live map of registered regions. */
  constructor(regions: ReadonlyMap<number, MemoryRegion>, threads = 1) {
    this.#regions = regions;
    this.#threads = threads;
  }

  /**
   * Hashes `blockIds` and keeps the checksums, in the regions named (default: every
   * registered region that has the ids; an engine names its KV regions, not staging).
   */
  record(blockIds: Iterable<number>, regionIds?: Iterable<number>): void {
    const chosen =
      regionIds === undefined
        ? [...this.#regions.values()]
        : [...regionIds].map((id) => this.#regions.get(id));
    // One sort of the ids for all regions, each run clipped to the region's blocks.
    const runs = consecutiveRuns(blockIds, Math.max(0, ...chosen.map((r) => r?.numBlocks ?? 0)));
    // Each run of each region, with where its checksums go.
    const pieces: (HashRun & { readonly to: Float64Array })[] = [];
    let bytes = 0;
    let blocks = 0;
    for (const region of chosen) {
      if (region === undefined) continue;
      const sums = this.#table(region);
      for (const [first, all] of runs) {
        const count = Math.min(all, region.numBlocks - first);
        if (count <= 0) continue;
        const at = first * region.blockBytes;
        const bb = region.blockBytes;
        pieces.push({
          src: region.bytes.subarray(at, at + count * bb),
          blockBytes: bb,
          count,
          to: sums.subarray(first, first + count),
        });
        bytes += count * bb;
        blocks += count;
      }
    }
    const threads = copyThreadsFor(bytes, this.#threads);
    if (threads <= 1) {
      for (const p of pieces) blockChecksumsInto(p.src, p.blockBytes, p.count, p.to);
      return;
    }
    // A large record (a long prefill's blocks) is hashed on the agent's copy threads.
    const out = new Float64Array(blocks);
    checksumRuns(pieces, out, threads);
    let at = 0;
    for (const p of pieces) {
      p.to.set(out.subarray(at, at + p.count));
      at += p.count;
    }
  }

  /** Drops the records of `blockIds` in every region (their content is about to change). */
  forget(blockIds: Iterable<number>): void {
    if (this.#sums.size === 0) return;
    for (const b of blockIds)
      for (const sums of this.#sums.values()) if (b >= 0 && b < sums.length) sums[b] = NaN;
  }

  /** Drops the records of `count` blocks of one region from `first` (a transfer lands data there). */
  forgetRun(region: number, first: number, count: number): void {
    const sums = this.#sums.get(region);
    if (sums) sums.fill(NaN, Math.max(0, first), Math.min(sums.length, first + count));
  }

  /** Forgets every record of these regions (they are registered anew). */
  dropRegions(ids: Iterable<number>): void {
    for (const id of ids) this.#sums.delete(id);
  }

  /** The recorded checksums of `count` blocks of `region` from `first`, or null unless all are recorded. */
  sums(region: number, first: number, count: number): number[] | null {
    const sums = this.#sums.get(region);
    if (!sums || first < 0 || first + count > sums.length) return null;
    const out = new Array<number>(count);
    for (let i = 0; i < count; i++) {
      const s = sums[first + i]!;
      if (Number.isNaN(s)) return null;
      out[i] = s;
    }
    return out;
  }

  /** True when every one of `count` blocks of `region` from `first` has a record (nothing allocated). */
  hasAll(region: number, first: number, count: number): boolean {
    const sums = this.#sums.get(region);
    if (!sums || first < 0 || first + count > sums.length) return false;
    for (let b = first; b < first + count; b++) if (Number.isNaN(sums[b]!)) return false;
    return true;
  }

  /**
   * Writes the recorded checksums of `count` blocks of `region` from `first` into `out` (from
   * index `at`) and returns the [offset, count] pieces of the run (offsets from `first`) that
   * have none.
   */
  fillRecorded(
    region: number,
    first: number,
    count: number,
    out: Float64Array,
    at = 0,
  ): readonly (readonly [number, number])[] {
    const sums = this.#sums.get(region);
    if (!sums || first < 0 || first + count > sums.length) return count > 0 ? [[0, count]] : [];
    let missing: [number, number][] | null = null;
    let last: [number, number] | undefined;
    for (let i = 0; i < count; i++) {
      const s = sums[first + i]!;
      if (!Number.isNaN(s)) out[at + i] = s;
      else if (last !== undefined && last[0] + last[1] === i) last[1]++;
      else {
        last = [i, 1];
        missing ??= [];
        missing.push(last);
      }
    }
    return missing ?? NONE_MISSING;
  }

  #table(region: MemoryRegion): Float64Array {
    let sums = this.#sums.get(region.id);
    if (!sums || sums.length !== region.numBlocks) {
      sums = new Float64Array(region.numBlocks).fill(NaN);
      this.#sums.set(region.id, sums);
    }
    return sums;
  }
}
