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
import { copyAndChecksum } from './checksum.ts';
import type { PeerKvMap } from './kv-map.ts';
import { type LeaseViews, leaseHash, MULTI } from './lease-table.ts';
import type { DescPair, MemoryRegion } from './types.ts';

/** Set to 1 to make agents not offer their lease table: every READ then asks the owner. */
export const DISABLE_DIRECT_READ_ENV = 'KVCONNECT_DISABLE_DIRECT_READ';

export interface DirectReadSource {
  readonly kv: PeerKvMap;
  readonly leases: LeaseViews;
}

export interface Reader {
  readonly agentName: string;
  readonly engineId: string;
}

/** Copies and verifies every block of `descs` from the peer; false (nothing decided) when the owner must be asked. */
export function directRead(
  source: DirectReadSource,
  reader: Reader,
  regions: ReadonlyMap<number, MemoryRegion>,
  descs: readonly DescPair[],
  grantKey: string | undefined,
): boolean {
  const v = source.leases;
  const keyHash = grantKey === undefined ? null : leaseHash(grantKey);
  const me1 = leaseHash(reader.agentName);
  const me2 = leaseHash(reader.engineId);
  const blocks: number[] = [];
  const seqs: number[] = [];
  const now = Date.now();
  for (const d of descs) {
    const r = v.regionIndex(d.remoteRegion);
    if (r < 0 || d.remoteFirst + d.count > v.blocks) return false;
    const sums = v.sums(r);
    for (let b = d.remoteFirst; b < d.remoteFirst + d.count; b++) {
      const seq = Atomics.load(v.seq, b);
      const key = v.key[b]!;
      const peer = v.peer[b]!;
      if ((seq & 1) !== 0 || key === 0 || key === MULTI || (keyHash !== null && key !== keyHash))
        return false;
      if ((peer !== 0 && peer !== me1 && peer !== me2) || !(v.expires[b]! > now) || Number.isNaN(sums[b]!))
        return false;
      blocks.push(b);
      seqs.push(seq);
    }
  }
  for (const d of descs) {
    const local = regions.get(d.localRegion)!;
    const bb = local.blockBytes;
    const src = source.kv.view(d.remoteRegion, d.remoteFirst * bb, d.count * bb);
    if (src === null) return false;
    const dst = local.bytes.subarray(d.localFirst * bb, (d.localFirst + d.count) * bb);
    const got = copyAndChecksum(dst, src, bb, d.count);
    const want = v.sums(v.regionIndex(d.remoteRegion));
    for (let i = 0; i < d.count; i++) if (got[i] !== want[d.remoteFirst + i]) return false;
  }
  // The grant must have been live, unchanged, during the whole copy.
  const after = Date.now();
  for (let i = 0; i < blocks.length; i++) {
    const b = blocks[i]!;
    if (Atomics.load(v.seq, b) !== seqs[i] || !(v.expires[b]! > after)) return false;
  }
  return true;
}
