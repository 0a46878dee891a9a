/**
 * The lease table: the owner's live READ grants and the checksum of every granted block, in
 * memory a same-host peer maps read-only (like the KV itself, see kv-map.ts). Two uses:
 * - the owner computes each granted block's checksum once, when it grants the block (a granted
 *   block is a lease: the engine does not write it until the grant ends), so serving a READ
 *   sends the block without hashing it again;
 * - a same-host reader that has mapped both the owner's KV and this table serves its own READ
 *   (direct-read.ts): it checks here that a live grant covers the blocks for it, copies them
 *   while hashing, compares with the checksums here, and checks that the grant did not change
 *   meanwhile. No message and no wake-up of the owner: the copy is the whole cost.
 *
 * Layout (one shared allocation; per-block entries are guarded by a sequence counter that is
 * odd while the owner rewrites the entry, a seqlock). A block has SLOTS grant slots: a block
 * shared by several requests (a common prefix) is granted once per request, and the grants
 * of a block beyond SLOTS are not in the table (readers then ask the owner):
 *   int32 header[4 + regions]  magic, version, blocks, regions, region ids…  (padded to 8 bytes)
 *   int32 seq[blocks]          (padded to 8 bytes)
 *   f64   key[blocks][SLOTS]   hash of a grant key; 0 = free slot
 *   f64   peer[blocks][SLOTS]  hash of that grant's peer; 0 = any authenticated peer ('*')
 *   f64   expires[blocks][SLOTS] epoch ms (Infinity = until revoked)
 *   f64   sums[regions][blocks] the block checksum at the latest grant; NaN = not granted
 * Only grants that cover every registered region are published; others are served the
 * request way (the owner checks every READ it serves, whatever this table says).
 */
import { allocateShared } from '../util/shared-memory.ts';
import { type BlockRecords, consecutiveRuns } from './block-records.ts';
import { blockChecksumsInto } from './checksum.ts';
import type { MemoryRegion } from './types.ts';

const MAGIC = 0x4b564c54; // 'KVLT'
const VERSION = 2;
const HEADER_INTS = 4;
/** Grant slots per block. */
export const SLOTS = 4;

/** A 53-bit hash of a grant key or peer name, never 0 (0 means "none" / "any peer"). */
export function leaseHash(s: string): number {
  let h1 = 0xdeadbeef;
  let h2 = 0x41c6ce57;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 2654435761);
    h2 = Math.imul(h2 ^ c, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return 4294967296 * (2097151 & h2) + (h1 >>> 0) || 1;
}

const pad8 = (bytes: number): number => Math.ceil(bytes / 8) * 8;

/** Typed views over a lease table's bytes (the owner's writable ones or a peer's read-only mapping). */
export class LeaseViews {
  readonly blocks: number;
  readonly regionIds: readonly number[];
  readonly seq: Int32Array;
  readonly key: Float64Array;
  readonly peer: Float64Array;
  readonly expires: Float64Array;
  readonly #sums: Float64Array;
  readonly #regionIndex = new Map<number, number>();

  private constructor(buffer: ArrayBufferLike, offset: number, blocks: number, regionIds: readonly number[]) {
    this.blocks = blocks;
    this.regionIds = regionIds;
    for (const [i, id] of regionIds.entries()) this.#regionIndex.set(id, i);
    let at = offset + pad8((HEADER_INTS + regionIds.length) * 4);
    this.seq = new Int32Array(buffer, at, blocks);
    at += pad8(blocks * 4);
    this.key = new Float64Array(buffer, at, blocks * SLOTS);
    at += blocks * SLOTS * 8;
    this.peer = new Float64Array(buffer, at, blocks * SLOTS);
    at += blocks * SLOTS * 8;
    this.expires = new Float64Array(buffer, at, blocks * SLOTS);
    at += blocks * SLOTS * 8;
    this.#sums = new Float64Array(buffer, at, blocks * regionIds.length);
  }

  static bytes(blocks: number, regions: number): number {
    return pad8((HEADER_INTS + regions) * 4) + pad8(blocks * 4) + blocks * 8 * (3 * SLOTS + regions);
  }

  /** Writes a fresh header and returns the views (owner side). */
  static create(buffer: ArrayBufferLike, blocks: number, regionIds: readonly number[]): LeaseViews {
    const head = new Int32Array(buffer, 0, HEADER_INTS + regionIds.length);
    head.set([MAGIC, VERSION, blocks, regionIds.length, ...regionIds]);
    const v = new LeaseViews(buffer, 0, blocks, regionIds);
    v.#sums.fill(Number.NaN);
    return v;
  }

  /** Reads a header written by create(); null when `bytes` does not hold a lease table (peer side). */
  static open(bytes: Uint8Array): LeaseViews | null {
    if (bytes.byteOffset % 8 !== 0 || bytes.length < HEADER_INTS * 4) return null;
    const head = new Int32Array(bytes.buffer, bytes.byteOffset, HEADER_INTS);
    const [magic, version, blocks, regions] = head as unknown as [number, number, number, number];
    if (magic !== MAGIC || version !== VERSION || blocks < 0 || regions < 0) return null;
    if (LeaseViews.bytes(blocks, regions) > bytes.length) return null;
    const ids = [...new Int32Array(bytes.buffer, bytes.byteOffset + HEADER_INTS * 4, regions)];
    return new LeaseViews(bytes.buffer, bytes.byteOffset, blocks, ids);
  }

  /** The slot of block `b` holding grant `keyHash`, or -1. */
  slotOf(b: number, keyHash: number): number {
    for (let s = b * SLOTS; s < (b + 1) * SLOTS; s++) if (this.key[s] === keyHash) return s;
    return -1;
  }

  /** Index of region `id` in the table, or -1. */
  regionIndex(id: number): number {
    return this.#regionIndex.get(id) ?? -1;
  }

  /** The checksums of region index `r`, one per block. */
  sums(r: number): Float64Array {
    return this.#sums.subarray(r * this.blocks, (r + 1) * this.blocks);
  }

  /** Every region's checksums in one array: region index `r`, block `b` at `r * blocks + b`. */
  get allSums(): Float64Array {
    return this.#sums;
  }

  /** Clears block `b`'s checksum in every region (no views made: withdrawing a grant is on the transfer's path). */
  clearSums(b: number): void {
    for (let at = b; at < this.#sums.length; at += this.blocks) this.#sums[at] = Number.NaN;
  }
}

interface Published {
  readonly blocks: readonly number[];
  readonly keyHash: number;
}

/** Hash of the peer name a grant names: 0 for any peer ('*'). */
export function peerHash(peer: string): number {
  return peer === '*' ? 0 : leaseHash(peer);
}

/** The owner's side: publishes READ grants as they are made and ended. */
export class LeaseTable {
  /** The table's bytes: offered to same-host peers when they lie in mappable memory. */
  readonly bytes: Uint8Array;
  readonly #views: LeaseViews;
  readonly #regions: readonly MemoryRegion[];
  /** Live published grants covering each block. */
  readonly #count: Uint16Array;
  readonly #published = new Map<string, Published>();
  readonly #records: BlockRecords | undefined;

  /** `records`: checksums the engine recorded when it wrote the blocks, used instead of hashing them. */
  constructor(regions: readonly MemoryRegion[], records?: BlockRecords) {
    this.#regions = regions;
    this.#records = records;
    const blocks = Math.max(0, ...regions.map((r) => r.numBlocks));
    const ids = regions.map((r) => r.id);
    const size = LeaseViews.bytes(blocks, ids.length);
    this.bytes = new Uint8Array(allocateShared(size), 0, size);
    this.#views = LeaseViews.create(this.bytes.buffer, blocks, ids);
    this.#count = new Uint16Array(blocks);
  }

  /**
   * Publishes READ grant `key` (covering every region): computes the checksum of each of its
   * blocks in every region, then makes the entries live. A key granted again replaces the old.
   * `recordedOnly`: take the recorded checksums and hash nothing (a block without a record keeps
   * the checksum another live grant of it holds, else has none: a direct READ of it goes to the
   * owner).
   */
  publish(
    key: string,
    blockIds: Iterable<number>,
    peer: string,
    expiresAt: number,
    recordedOnly = false,
  ): void {
    this.withdraw(key);
    const v = this.#views;
    const runs = consecutiveRuns(blockIds, v.blocks);
    const blocks: number[] = [];
    for (const [first, count] of runs) for (let b = first; b < first + count; b++) blocks.push(b);
    const keyHash = leaseHash(key);
    const who = peerHash(peer);
    for (const b of blocks) {
      if (this.#count[b]! < 0xffff) this.#count[b]!++;
      // Readers see the entry change (odd sequence) before its checksums are rewritten.
      Atomics.add(v.seq, b, 1);
      const slot = v.slotOf(b, 0);
      if (slot >= 0) {
        v.key[slot] = keyHash;
        v.peer[slot] = who;
        v.expires[slot] = expiresAt;
      }
    }
    // Computed again for every grant (a grant's checksums are those of its blocks when it is
    // made, or recorded since the engine wrote them), in runs of consecutive blocks: one
    // native call per run and region.
    for (const [first, count] of runs) this.#hashRun(first, count, recordedOnly);
    for (const b of blocks) Atomics.add(v.seq, b, 1);
    this.#published.set(key, { blocks, keyHash });
  }

  /** Ends grant `key` in the table (revoked, expired or replaced). */
  withdraw(key: string): void {
    const p = this.#published.get(key);
    if (!p) return;
    this.#published.delete(key);
    const v = this.#views;
    for (const b of p.blocks) {
      if (this.#count[b]! > 0) this.#count[b]!--;
      const last = this.#count[b] === 0;
      const slot = v.slotOf(b, p.keyHash);
      if (slot < 0 && !last) continue;
      // Rewritten under the block's sequence counter (odd while it changes), as in #write.
      Atomics.add(v.seq, b, 1);
      if (slot >= 0) v.key[slot] = 0;
      if (last) v.clearSums(b);
      Atomics.add(v.seq, b, 1);
    }
  }

  /** Moves the expiry of grant `key`'s entries (lease renewal). */
  renew(key: string, expiresAt: number): void {
    const p = this.#published.get(key);
    if (!p) return;
    const v = this.#views;
    for (const b of p.blocks) {
      const slot = v.slotOf(b, p.keyHash);
      if (slot < 0) continue;
      this.#write(b, () => {
        v.expires[slot] = expiresAt;
      });
    }
  }

  /** Ends every published grant (the table is being replaced). */
  clear(): void {
    for (const key of [...this.#published.keys()]) this.withdraw(key);
  }

  /**
   * The checksums recorded at grant time for `count` blocks of `region` from `first`, or null
   * when any of them is not covered by a live published grant.
   */
  sums(region: number, first: number, count: number): number[] | null {
    const v = this.#views;
    const r = v.regionIndex(region);
    if (r < 0 || first + count > v.blocks) return null;
    const sums = v.sums(r);
    const out = new Array<number>(count);
    for (let i = 0; i < count; i++) {
      const s = sums[first + i]!;
      if (this.#count[first + i] === 0 || Number.isNaN(s)) return null;
      out[i] = s;
    }
    return out;
  }

  /**
   * Records the checksums of blocks [first, first + count) in every region that has them,
   * written in place (no view per region: a publish is on a WRITE's path).
   */
  #hashRun(first: number, count: number, recordedOnly: boolean): void {
    const v = this.#views;
    const all = v.allSums;
    for (let r = 0; r < this.#regions.length; r++) {
      const region = this.#regions[r]!;
      const n = Math.min(count, region.numBlocks - first);
      if (n <= 0) continue;
      const base = r * v.blocks + first;
      const missing = this.#records?.fillRecorded(region.id, first, n, all, base) ?? [[0, n]];
      for (const [off, m] of missing) {
        if (recordedOnly) {
          // No checksum for this grant; one that another live grant of the block holds stays.
          for (let i = off; i < off + m; i++) if (this.#count[first + i]! <= 1) all[base + i] = Number.NaN;
          continue;
        }
        const at = (first + off) * region.blockBytes;
        const bytes = region.bytes.subarray(at, at + m * region.blockBytes);
        blockChecksumsInto(bytes, region.blockBytes, m, all.subarray(base + off, base + off + m));
      }
    }
  }

  /** Rewrites block b's entry under its sequence counter (odd while it changes). */
  #write(b: number, update: () => void): void {
    Atomics.add(this.#views.seq, b, 1);
    try {
      update();
    } finally {
      Atomics.add(this.#views.seq, b, 1);
    }
  }
}
