/**
 * copyAndChecksumRuns (checksum.ts, native/kvhash.c copyHashRuns): several runs copied and
 * hashed in one call, the blocks shared out between threads. Every byte must land where a
 * one-thread copy puts it and every checksum equal the block's own, whatever the threads'
 * shares (a share may start or end inside a run, a run may be shorter than a share), and a
 * large direct READ with copy threads must copy and verify exactly as one without.
 */
import assert from 'node:assert/strict';
import { randomFillSync } from 'node:crypto';
import { describe, it } from 'node:test';
import { COPY_THREADS_ENV } from '../../src/transfer/agent-checks.ts';
import { BlockRecords } from '../../src/transfer/block-records.ts';
import {
  blockChecksums,
  type CopyRun,
  checksumRuns,
  copyAndChecksumRuns,
  copyThreadsFor,
  MIN_BYTES_PER_COPY_THREAD,
} from '../../src/transfer/checksum.ts';
import { directRead } from '../../src/transfer/direct-read.ts';
import { InThreadTransferAgent, ThreadedTransferAgent } from '../../src/transfer/index.ts';
import { exposedRegions, PeerKvMap } from '../../src/transfer/kv-map.ts';
import { LeaseTable, LeaseViews } from '../../src/transfer/lease-table.ts';
import { nativeFunctions } from '../../src/util/native-addon.ts';
import { mappableSharedMemory } from '../../src/util/shared-memory.ts';
import { blocksEqual, makeRegion } from './helpers/pattern.ts';

const native =
  nativeFunctions('copyHashRuns') !== null && process.env['KVCONNECT_DISABLE_NATIVE_HASH'] !== '1';
const skip = native ? false : 'no native addon: copies run on one thread';

/** Runs of `counts` blocks of `blockBytes[i]` over fresh random source and zeroed destination memory. */
function makeRuns(counts: readonly number[], blockBytes: readonly number[]): CopyRun[] {
  return counts.map((count, i) => {
    const bb = blockBytes[i % blockBytes.length]!;
    const src = randomFillSync(new Uint8Array(bb * count));
    return { dst: new Uint8Array(bb * count), src, blockBytes: bb, count };
  });
}

describe('copyAndChecksumRuns', () => {
  it('copies and hashes every block of every run on 1 to 5 threads', { skip }, () => {
    const counts = [1, 7, 3, 64, 2, 1, 19];
    for (const threads of [1, 2, 3, 4, 5]) {
      const runs = makeRuns(counts, [4096, 16384, 512]);
      const total = counts.reduce((a, b) => a + b, 0);
      const out = new Float64Array(total + 3).fill(-1);
      copyAndChecksumRuns(runs, out, threads);
      let at = 0;
      for (const r of runs) {
        assert.deepEqual(r.dst, r.src, `bytes of a ${r.count}-block run, ${threads} threads`);
        assert.deepEqual([...out.subarray(at, at + r.count)], blockChecksums(r.src, r.blockBytes, r.count));
        at += r.count;
      }
      assert.deepEqual([...out.subarray(total)], [-1, -1, -1], 'nothing written past the runs');
    }
  });

  it('takes more threads than blocks, and no runs at all', { skip }, () => {
    const runs = makeRuns([1, 1], [4096]);
    const out = new Float64Array(2);
    copyAndChecksumRuns(runs, out, 8);
    for (const r of runs) assert.deepEqual(r.dst, r.src);
    assert.deepEqual(
      [...out],
      [...blockChecksums(runs[0]!.src, 4096, 1), ...blockChecksums(runs[1]!.src, 4096, 1)],
    );
    copyAndChecksumRuns([], new Float64Array(0), 2);
  });

  it('refuses runs that do not fit', { skip }, () => {
    const [run] = makeRuns([2], [4096]);
    assert.throws(() => copyAndChecksumRuns([run!], new Float64Array(1), 2), /out is shorter/);
    const short = { ...run!, src: run!.src.subarray(0, 4096) };
    assert.throws(() => copyAndChecksumRuns([short], new Float64Array(2), 2), RangeError);
  });

  it('uses more than one thread only for large copies', { skip }, () => {
    assert.equal(copyThreadsFor(MIN_BYTES_PER_COPY_THREAD * 2 - 1, 4), 1);
    assert.equal(copyThreadsFor(MIN_BYTES_PER_COPY_THREAD * 2, 4), 2);
    assert.equal(copyThreadsFor(MIN_BYTES_PER_COPY_THREAD * 64, 4), 4);
    assert.equal(copyThreadsFor(MIN_BYTES_PER_COPY_THREAD * 64, 1), 1);
  });

  it('a large direct READ with copy threads copies and verifies as with one', {
    skip: skip || !mappableSharedMemory,
  }, () => {
    const BB = 64 << 10;
    const N = 160;
    const owners = [makeRegion(0, BB, N, 3), makeRegion(1, BB, N, 4)];
    const mine = new Map([
      [0, makeRegion(0, BB, N, 5)],
      [1, makeRegion(1, BB, N, 6)],
    ]);
    const table = new LeaseTable(owners);
    const kv = PeerKvMap.map(exposedRegions(owners))!;
    const source = { kv, leases: LeaseViews.open(table.bytes)! };
    const reader = { agentName: 'D-rank0', engineId: 'D', copyThreads: 2 };
    const ids = Array.from({ length: 128 }, (_, i) => i + 10);
    table.publish('k', ids, 'D', Date.now() + 60_000);
    const descs = [0, 1].flatMap((region) => [
      { localRegion: region, localFirst: 0, remoteRegion: region, remoteFirst: 10, count: 50 },
      { localRegion: region, localFirst: 60, remoteRegion: region, remoteFirst: 60, count: 78 },
    ]);
    assert.ok(copyThreadsFor(256 * BB, 2) === 2, 'this READ is large enough for two threads');
    assert.equal(directRead(source, reader, mine, descs, 'k'), null);
    for (const region of [0, 1]) {
      assert.ok(blocksEqual(mine.get(region)!.bytes, 0, owners[region]!.bytes, 10, 50, BB));
      assert.ok(blocksEqual(mine.get(region)!.bytes, 60, owners[region]!.bytes, 60, 78, BB));
    }
    owners[1]!.bytes[(60 + 77) * BB + 5]! ^= 1; // the last block of the last run changed after its grant
    assert.match(directRead(source, reader, mine, descs, 'k') ?? '', /checksum differs/);
    kv.close();
  });

  it('refuses copy threads that are not a whole number from 1 to 16, naming the option or the variable', async () => {
    await assert.rejects(
      InThreadTransferAgent.create({ engineId: 'X', copyThreads: 0 }),
      /copyThreads must be a whole number from 1 to 16, got 0; set it to 1/,
    );
    const saved = process.env[COPY_THREADS_ENV];
    process.env[COPY_THREADS_ENV] = 'two';
    try {
      await assert.rejects(
        InThreadTransferAgent.create({ engineId: 'X' }),
        /KVCONNECT_COPY_THREADS \(environment\) must be a whole number from 1 to 16, got "two"/,
      );
    } finally {
      if (saved === undefined) delete process.env[COPY_THREADS_ENV];
      else process.env[COPY_THREADS_ENV] = saved;
    }
  });

  it('hashes runs in place on threads (checksumRuns), and a large record uses them', { skip }, () => {
    const runs = makeRuns([5, 64, 1, 30], [16384, 65536]);
    const out = new Float64Array(100);
    checksumRuns(runs, out, 3);
    let at = 0;
    for (const r of runs) {
      assert.deepEqual([...out.subarray(at, at + r.count)], blockChecksums(r.src, r.blockBytes, r.count));
      at += r.count;
    }
    const BB = 64 << 10;
    const regions = [makeRegion(0, BB, 80, 11), makeRegion(1, BB, 80, 12)];
    const records = new BlockRecords(new Map(regions.map((r) => [r.id, r])), 2);
    const ids = [...Array.from({ length: 40 }, (_, i) => i + 2), 60, 61, 79];
    assert.ok(copyThreadsFor(2 * ids.length * BB, 2) === 2, 'this record is large enough for two threads');
    records.record(ids);
    for (const region of regions) {
      assert.deepEqual(records.sums(region.id, 2, 40), blockChecksums(region.bytes.subarray(2 * BB), BB, 40));
      assert.deepEqual(records.sums(region.id, 60, 2), blockChecksums(region.bytes.subarray(60 * BB), BB, 2));
      assert.deepEqual(records.sums(region.id, 79, 1), blockChecksums(region.bytes.subarray(79 * BB), BB, 1));
      assert.equal(records.sums(region.id, 42, 1), null, 'block 42 was not recorded');
    }
  });

  for (const [kind, create] of [
    ['in-thread', InThreadTransferAgent.create],
    ['threaded', ThreadedTransferAgent.create],
  ] as const) {
    it(`${kind} agents with two copy threads: a large direct READ and a large pulled WRITE land verified`, {
      skip: skip || !mappableSharedMemory,
    }, async () => {
      const BB = 64 << 10;
      const N = 60;
      const a = await create({ engineId: 'A', backends: ['SHM'], copyThreads: 2 });
      const b = await create({ engineId: 'B', backends: ['SHM'], copyThreads: 2 });
      try {
        assert.equal(a.copyThreads, 2);
        const ra = [makeRegion(0, BB, N, 21), makeRegion(1, BB, N, 22)];
        const rb = [makeRegion(0, BB, N, 23), makeRegion(1, BB, N, 24)];
        a.registerMemory(ra);
        b.registerMemory(rb);
        const remote = a.addRemoteAgent(b.metadata());
        // 2 regions × 48 blocks × 64 KiB = 6 MiB each way: enough for two threads.
        const descs = [0, 1].map((region) => ({
          localRegion: region,
          localFirst: 4,
          remoteRegion: region,
          remoteFirst: 10,
          count: 48,
        }));
        const ids = Array.from({ length: 48 }, (_, i) => i + 10);
        b.recordBlocks(ids);
        b.grantRead('r', { blockIds: ids, peer: 'A' });
        await b.settled();
        const read = await a.waitFor(a.read(remote, descs, { grantKey: 'r' }));
        assert.equal(read.state, 'DONE', read.reason);
        for (const r of [0, 1])
          assert.ok(blocksEqual(ra[r]!.bytes, 4, rb[r]!.bytes, 10, 48, BB), `READ, region ${r}`);
        // Back the other way: A's own blocks 4.. (recorded) into B's 10.., which B copies itself.
        for (const r of ra) r.bytes.fill(r.id + 90, 4 * BB, 52 * BB);
        a.recordBlocks(Array.from({ length: 48 }, (_, i) => i + 4));
        b.grantWrite('w', { blockIds: ids, peer: 'A' });
        await b.settled();
        const write = await a.waitFor(a.write(remote, descs));
        assert.equal(write.state, 'DONE', write.reason);
        for (const r of [0, 1])
          assert.ok(blocksEqual(ra[r]!.bytes, 4, rb[r]!.bytes, 10, 48, BB), `WRITE, region ${r}`);
        assert.equal(a.resetStats().numPulledWrites, 1, 'B pulled the WRITE');
      } finally {
        await a.close();
        await b.close();
      }
    });
  }
});
