/**
 * A same-host READ served by the reader itself: when it has mapped the owner's KV memory
 * (kv-map.ts) and the owner's lease table (lease-table.ts), it checks in the table that a live
 * grant of the named key covers every requested block for it, copies the blocks straight from
 * the owner's KV into its own while hashing them (one pass), compares with the checksums the
 * owner recorded at grant time, and checks that no entry changed meanwhile (each entry has a
 * sequence counter the owner bumps when it rewrites it). No message goes to the owner and the
 * owner is not woken: a one-block READ costs the copy. Anything else (an entry in use by
 * several grants, a grant not there yet or ended, a checksum that does not match) returns
 * false and the READ goes the request way, where the owner decides and explains.
 */
import { type CopyRun, copyAndChecksumInto, copyAndChecksumRuns, copyThreadsFor } from './checksum.ts';
import type { PeerKvMap } from './kv-map.ts';
import { type LeaseViews, leaseHash, SLOTS } from './lease-table.ts';
import type { DescPair, MemoryRegion } from './types.ts';

export interface DirectReadSource {
  readonly kv: PeerKvMap;
  readonly leases: LeaseViews;
}

export interface Reader {
  readonly agentName: string;
  readonly engineId: string;
  /** Threads a large READ's copy may use (TransferAgentOptions.copyThreads); default 1. */
  readonly copyThreads?: number;
}

/** True when slot `s` holds a grant for the reader (hashes `me0`, `me1`), live at `now`. */
function liveFor(v: LeaseViews, s: number, me0: number, me1: number, now: number): boolean {
  const peer = v.peer[s]!;
  return v.key[s] !== 0 && (peer === 0 || peer === me0 || peer === me1) && v.expires[s]! > now;
}

/** True when block `b` has a grant of `key` live for the reader at `now`. */
function covers(v: LeaseViews, b: number, key: number, me0: number, me1: number, now: number): boolean {
  for (let s = b * SLOTS; s < (b + 1) * SLOTS; s++)
    if (v.key[s] === key && liveFor(v, s, me0, me1, now)) return true;
  return false;
}

/** The grant keys (hashes) live for the reader on block `b` at `now`. */
function liveKeys(v: LeaseViews, b: number, me0: number, me1: number, now: number): number[] {
  const keys: number[] = [];
  for (let s = b * SLOTS; s < (b + 1) * SLOTS; s++) if (liveFor(v, s, me0, me1, now)) keys.push(v.key[s]!);
  return keys;
}

/** Drops from `keys` (in place) those that do not cover block `b`; returns how many are left. */
function narrow(keys: number[], v: LeaseViews, b: number, me0: number, me1: number, now: number): number {
  let n = 0;
  for (const k of keys) if (covers(v, b, k, me0, me1, now)) keys[n++] = k;
  keys.length = n;
  return n;
}

/** leaseHash of the reader's names, kept (a direct READ is on the latency path). */
const nameHashes = new Map<string, number>();
function nameHash(name: string): number {
  let h = nameHashes.get(name);
  if (h === undefined) {
    if (nameHashes.size > 64) nameHashes.clear();
    h = leaseHash(name);
    nameHashes.set(name, h);
  }
  return h;
}

let sumsOut = new Float64Array(64);

/** Why a run's copied blocks fail (their checksums `got` from `at`, the owner's from block `first`), or null. */
function mismatch(
  got: Float64Array,
  at: number,
  want: Float64Array,
  first: number,
  count: number,
): string | null {
  for (let i = 0; i < count; i++) {
    const w = want[first + i]!;
    if (got[at + i] !== w) return Number.isNaN(w) ? 'no checksum recorded' : 'a checksum differs';
  }
  return null;
}

/**
 * Copies every block of `descs` from the owner's mapped KV into the reader's while hashing it,
 * and compares with the owner's checksums: run by run on this thread, or, for a large READ
 * and `threads` > 1, all runs in one native call shared out between threads.
 */
function copyAndVerify(
  source: DirectReadSource,
  regions: ReadonlyMap<number, MemoryRegion>,
  descs: readonly DescPair[],
  threads: number,
): string | null {
  const v = source.leases;
  let bytes = 0;
  let blocks = 0;
  for (const d of descs) {
    bytes += d.count * regions.get(d.localRegion)!.blockBytes;
    blocks += d.count;
  }
  const parallel = copyThreadsFor(bytes, threads);
  const runs: CopyRun[] = [];
  for (const d of descs) {
    const local = regions.get(d.localRegion)!;
    const bb = local.blockBytes;
    const src = source.kv.view(d.remoteRegion, d.remoteFirst * bb, d.count * bb);
    if (src === null) return 'a region that is not mapped';
    const dst = local.bytes.subarray(d.localFirst * bb, (d.localFirst + d.count) * bb);
    if (parallel > 1) {
      runs.push({ dst, src, blockBytes: bb, count: d.count });
      continue;
    }
    if (sumsOut.length < d.count) sumsOut = new Float64Array(d.count);
    copyAndChecksumInto(dst, src, bb, d.count, sumsOut);
    const bad = mismatch(sumsOut, 0, v.sums(v.regionIndex(d.remoteRegion)), d.remoteFirst, d.count);
    if (bad !== null) return bad;
  }
  if (parallel <= 1) return null;
  if (sumsOut.length < blocks) sumsOut = new Float64Array(blocks);
  copyAndChecksumRuns(runs, sumsOut, parallel);
  let at = 0;
  for (const d of descs) {
    const bad = mismatch(sumsOut, at, v.sums(v.regionIndex(d.remoteRegion)), d.remoteFirst, d.count);
    if (bad !== null) return bad;
    at += d.count;
  }
  return null;
}

/**
 * Copies and verifies every block of `descs` from the peer. Returns null when done; otherwise
 * why the owner must be asked (nothing is decided: the READ then goes the request way).
 *
 * Its own cost is kept per block and per descriptor, not per block of every region: an
 * engine's READ names the same runs in each of its regions, so each run is checked once, and
 * a missing checksum (NaN) is found by the comparison after the copy (NaN equals nothing).
 */
export function directRead(
  source: DirectReadSource,
  reader: Reader,
  regions: ReadonlyMap<number, MemoryRegion>,
  descs: readonly DescPair[],
  grantKey: string | undefined,
): string | null {
  const v = source.leases;
  const me0 = nameHash(reader.agentName);
  const me1 = nameHash(reader.engineId);
  // The grant the READ names, or (none named) one grant that must cover every block, as the owner requires.
  let candidates: number[] | null = grantKey === undefined ? null : [leaseHash(grantKey)];
  const blocks: number[] = [];
  const seqs: number[] = [];
  // Each block's entry is checked once, each run of blocks looked at once.
  const seen = new Uint8Array(v.blocks);
  const runsSeen = descs.length > 1 ? new Set<number>() : null;
  const now = Date.now();
  for (const d of descs) {
    if (v.regionIndex(d.remoteRegion) < 0 || d.remoteFirst + d.count > v.blocks)
      return 'a region or block outside the lease table';
    const run = d.remoteFirst * 4294967296 + d.count;
    if (runsSeen?.has(run)) continue;
    runsSeen?.add(run);
    for (let b = d.remoteFirst; b < d.remoteFirst + d.count; b++) {
      if (seen[b] !== 0) continue;
      seen[b] = 1;
      const seq = Atomics.load(v.seq, b);
      if ((seq & 1) !== 0) return 'the owner is changing a grant';
      if (candidates === null) candidates = liveKeys(v, b, me0, me1, now);
      else narrow(candidates, v, b, me0, me1, now);
      if (candidates.length === 0) return 'no live grant in the table covers the blocks for this reader';
      blocks.push(b);
      seqs.push(seq);
    }
  }
  const copied = copyAndVerify(source, regions, descs, reader.copyThreads ?? 1);
  if (copied !== null) return copied;
  // The grant must have been live, unchanged, during the whole copy.
  const after = Date.now();
  for (let i = 0; i < blocks.length; i++) {
    const b = blocks[i]!;
    if (Atomics.load(v.seq, b) !== seqs[i]) return 'a grant changed during the copy';
    if (narrow(candidates!, v, b, me0, me1, after) === 0) return 'the grant ended during the copy';
  }
  return null;
}
