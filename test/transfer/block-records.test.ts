/**
 * Checksums recorded when the engine finished writing blocks (block-records.ts): WRITEs and
 * READ grants of recorded blocks send the recorded checksums instead of hashing, a block
 * changed after its record is never accepted (the receiver's check fails), forgetting a
 * record restores hashing, and a transfer that lands data in a block drops its record.
 * Each case changes a recorded block behind the agent's back: only a transfer that used the
 * record fails, so the failures show which checksums were used.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { BlockRecords, consecutiveRuns } from '../../src/transfer/block-records.ts';
import { blockChecksums } from '../../src/transfer/checksum.ts';
import {
  InThreadTransferAgent,
  ThreadedTransferAgent,
  type TransferAgent,
} from '../../src/transfer/index.ts';
import { LeaseTable } from '../../src/transfer/lease-table.ts';
import type { MemoryRegion } from '../../src/transfer/types.ts';
import { blocksEqual, makeRegion, regionPair } from './helpers/pattern.ts';
import { finished } from './helpers/wait.ts';

setLogLevel('silent');

const BB = 16 << 10;
const N = 16;

const regions = (seed: number): MemoryRegion[] => regionPair(BB, N, seed);

/** Flips one byte of block `b` of a region (the engine writing a block after recording it). */
function scribble(region: MemoryRegion, b: number): void {
  region.bytes[b * BB + 123] = region.bytes[b * BB + 123]! ^ 0xff;
}

describe('block records', () => {
  it('groups block ids into runs of consecutive ids, dropping duplicates and ids out of range', () => {
    assert.deepEqual(consecutiveRuns([5, 1, 2, 2, 3, 9, -1, 1.5, 16, 8], N), [
      [1, 3],
      [5, 1],
      [8, 2],
    ]);
    assert.deepEqual(consecutiveRuns([], N), []);
  });

  it('keeps the checksums of recorded blocks in every region until they are forgotten', () => {
    const rs = regions(1);
    const map = new Map(rs.map((r) => [r.id, r]));
    const records = new BlockRecords(map);
    assert.equal(records.sums(0, 2, 1), null, 'nothing recorded yet');
    records.record([2, 3, 4, 9]);
    for (const r of rs) {
      assert.deepEqual(records.sums(r.id, 2, 3), blockChecksums(r.bytes.subarray(2 * BB), BB, 3));
      assert.deepEqual(records.sums(r.id, 9, 1), blockChecksums(r.bytes.subarray(9 * BB), BB, 1));
    }
    assert.equal(records.sums(0, 4, 2), null, 'block 5 is not recorded');
    const before = records.sums(1, 3, 1);
    scribble(rs[1]!, 3);
    assert.deepEqual(records.sums(1, 3, 1), before, 'a record is what the block held when it was recorded');
    records.forget([3]);
    assert.equal(records.sums(0, 3, 1), null);
    assert.equal(records.sums(1, 2, 2), null);
    assert.notEqual(records.sums(1, 4, 1), null);
    records.forgetRun(0, 4, 1);
    assert.equal(records.sums(0, 4, 1), null, 'forgetRun drops one region');
    assert.notEqual(records.sums(1, 4, 1), null, 'and only that region');
    records.dropRegions([1]);
    assert.equal(records.sums(1, 9, 1), null);
    assert.notEqual(records.sums(0, 9, 1), null);
    // An engine names its KV regions: others (a staging pool) get no record.
    records.record([11], [1]);
    assert.notEqual(records.sums(1, 11, 1), null);
    assert.equal(records.sums(0, 11, 1), null);
  });

  it('records in each region the ids it has (regions of different sizes)', () => {
    const big = makeRegion(0, BB, N, 21);
    const small = makeRegion(2, BB, 8, 22);
    const records = new BlockRecords(new Map([big, small].map((r) => [r.id, r])));
    records.record([9, 6, 7, 8]);
    assert.deepEqual(records.sums(0, 6, 4), blockChecksums(big.bytes.subarray(6 * BB), BB, 4));
    assert.deepEqual(records.sums(2, 6, 2), blockChecksums(small.bytes.subarray(6 * BB), BB, 2));
    assert.equal(records.sums(2, 6, 3), null, 'the small region has no block 8');
  });

  it('lets a READ grant take recorded checksums instead of hashing the blocks', () => {
    const rs = regions(3);
    const records = new BlockRecords(new Map(rs.map((r) => [r.id, r])));
    const table = new LeaseTable(rs, records);
    records.record([1, 2]);
    const recorded = records.sums(0, 1, 2);
    scribble(rs[0]!, 2);
    table.publish('k', [1, 2, 3], '*', Number.POSITIVE_INFINITY);
    assert.deepEqual(table.sums(0, 1, 2), recorded, 'recorded, not hashed again');
    assert.deepEqual(
      table.sums(0, 3, 1),
      blockChecksums(rs[0]!.bytes.subarray(3 * BB), BB, 1),
      'block 3 hashed',
    );
    records.forget([2]);
    table.publish('k', [1, 2, 3], '*', Number.POSITIVE_INFINITY);
    assert.deepEqual(table.sums(0, 2, 1), blockChecksums(rs[0]!.bytes.subarray(2 * BB), BB, 1));
  });

  it('a recorded-only lease hashes nothing and keeps the checksum another live grant holds', () => {
    const rs = regions(13);
    const records = new BlockRecords(new Map(rs.map((r) => [r.id, r])));
    const table = new LeaseTable(rs, records);
    table.publish('other', [4], '*', Number.POSITIVE_INFINITY);
    const held = table.sums(1, 4, 1);
    records.record([3, 4], [0]);
    table.publish('pull', [3, 4], 'P', Number.POSITIVE_INFINITY, true);
    assert.deepEqual(table.sums(0, 3, 2), records.sums(0, 3, 2), 'region 0: the records');
    assert.deepEqual(table.sums(1, 4, 1), held, "region 1, block 4: the other grant's checksum stays");
    table.withdraw('other');
    table.publish('pull', [3], 'P', Number.POSITIVE_INFINITY, true);
    assert.equal(table.sums(1, 3, 1), null, 'region 1, block 3: no record and no other grant, no checksum');
  });
});

type Make = (engineId: string) => Promise<TransferAgent>;

const kinds: [string, Make][] = [
  ['in-thread', (engineId) => InThreadTransferAgent.create({ engineId, backends: ['TCP'] })],
  ['threaded', (engineId) => ThreadedTransferAgent.create({ engineId, backends: ['TCP'] })],
  ['in-thread over shm', (engineId) => InThreadTransferAgent.create({ engineId, backends: ['SHM'] })],
];

interface Pair {
  readonly a: TransferAgent;
  readonly b: TransferAgent;
  readonly src: MemoryRegion[];
  readonly dst: MemoryRegion[];
}

/**
 * Agents `names[0]` (on regions of seed `seeds[0]`) and `names[1]` (seed `seeds[1]`), the first
 * knowing the second; `body` runs, then both close.
 */
async function withPair(
  make: Make,
  names: readonly [string, string],
  seeds: readonly [number, number],
  body: (p: Pair) => Promise<void>,
): Promise<void> {
  const [src, dst] = [regions(seeds[0]), regions(seeds[1])];
  const a = await make(names[0]);
  const b = await make(names[1]);
  try {
    a.registerMemory(src);
    b.registerMemory(dst);
    a.addRemoteAgent(b.metadata());
    await body({ a, b, src, dst });
  } finally {
    await Promise.all([a.close(), b.close()]);
  }
}

for (const [kind, make] of kinds) {
  describe(`recorded checksums, ${kind} agents`, () => {
    it('a WRITE sends recorded checksums: a block changed after its record fails, forgetting it restores hashing', () =>
      withPair(make, ['A', 'B'], [5, 7], async ({ a, b, src, dst }) => {
        b.grantWrite('w', { blockIds: Array.from({ length: N }, (_, i) => i), peer: 'A-rank0' });
        await b.settled();
        const descs = [
          { localRegion: 0, localFirst: 2, remoteRegion: 0, remoteFirst: 6, count: 3 },
          { localRegion: 1, localFirst: 2, remoteRegion: 1, remoteFirst: 6, count: 3 },
        ];
        a.recordBlocks([2, 3, 4]);
        // What B recorded of its blocks 6–8 stops holding when the WRITEs land there.
        b.recordBlocks([6, 7, 8]);
        // A threaded agent hashes on its thread: the record is taken once the call settled.
        await Promise.all([a.settled(), b.settled()]);
        scribble(src[0]!, 3);
        const bad = await finished(a, a.write('B-rank0', descs));
        assert.equal(bad.state, 'ERR', 'the receiver checked block 3 against its record');
        assert.match(bad.reason ?? '', /checksum/);
        assert.deepEqual(bad.failedBlockIds, [3]);
        a.forgetBlocks([3]);
        const good = await finished(a, a.write('B-rank0', descs));
        assert.equal(good.state, 'DONE', good.reason);
        for (const r of [0, 1]) assert.ok(blocksEqual(src[r]!.bytes, 2, dst[r]!.bytes, 6, 3, BB));
        // B grants the landed blocks back: a stale record would fail A's check.
        b.grantRead('r', { blockIds: [6, 7, 8], peer: 'A-rank0' });
        await b.settled();
        const back = await finished(
          a,
          a.read('B-rank0', [{ localRegion: 1, localFirst: 10, remoteRegion: 1, remoteFirst: 6, count: 3 }], {
            grantKey: 'r',
          }),
        );
        assert.equal(back.state, 'DONE', back.reason);
        assert.ok(blocksEqual(src[1]!.bytes, 2, src[1]!.bytes, 10, 3, BB));
      }));

    it('a READ grant sends recorded checksums; data landed by a transfer drops the record', () =>
      withPair(make, ['R', 'O'], [11, 9], async ({ a: reader, b: owner, src: mine, dst: own }) => {
        const descs = [{ localRegion: 0, localFirst: 0, remoteRegion: 0, remoteFirst: 5, count: 2 }];
        owner.recordBlocks([5, 6]);
        // What the reader recorded of its blocks 0–1 stops holding when the READ lands there.
        reader.recordBlocks([0, 1]);
        await Promise.all([owner.settled(), reader.settled()]);
        scribble(own[0]!, 6);
        owner.grantRead('g', { blockIds: [5, 6], peer: 'R-rank0' });
        await owner.settled();
        const bad = await finished(reader, reader.read('O-rank0', descs, { grantKey: 'g' }));
        assert.equal(bad.state, 'ERR');
        assert.deepEqual(bad.failedBlockIds, [1], 'local block 1 got the changed block 6');
        assert.ok(blocksEqual(own[0]!.bytes, 5, mine[0]!.bytes, 0, 1, BB), 'block 5 landed');
        owner.forgetBlocks([6]);
        owner.grantRead('g', { blockIds: [5, 6], peer: 'R-rank0' });
        await owner.settled();
        const good = await finished(reader, reader.read('O-rank0', descs, { grantKey: 'g' }));
        assert.equal(good.state, 'DONE', good.reason);
        assert.ok(blocksEqual(own[0]!.bytes, 5, mine[0]!.bytes, 0, 2, BB));
        // A WRITE of the landed blocks: a stale record would fail the owner's check.
        owner.grantWrite('w', { blockIds: [10, 11], peer: 'R-rank0' });
        await owner.settled();
        const w = await finished(
          reader,
          reader.write('O-rank0', [
            { localRegion: 0, localFirst: 0, remoteRegion: 0, remoteFirst: 10, count: 2 },
          ]),
        );
        assert.equal(w.state, 'DONE', w.reason);
        assert.ok(blocksEqual(own[0]!.bytes, 5, own[0]!.bytes, 10, 2, BB));
      }));

    it('a READ served the request way (a grant of some regions, not in the lease table) sends the records', () =>
      withPair(make, ['R', 'O'], [17, 15], async ({ a: reader, b: owner, src: mine, dst: own }) => {
        owner.recordBlocks([7]);
        await owner.settled();
        scribble(own[1]!, 7);
        owner.grantRead('g', { blockIds: [7], regions: [1], peer: 'R-rank0' });
        await owner.settled();
        const descs = [{ localRegion: 1, localFirst: 3, remoteRegion: 1, remoteFirst: 7, count: 1 }];
        const bad = await finished(reader, reader.read('O-rank0', descs, { grantKey: 'g' }));
        assert.equal(bad.state, 'ERR', 'the owner sent the record, not a hash of the changed block');
        assert.deepEqual(bad.failedBlockIds, [3]);
        owner.forgetBlocks([7]);
        await owner.settled();
        const good = await finished(reader, reader.read('O-rank0', descs, { grantKey: 'g' }));
        assert.equal(good.state, 'DONE', good.reason);
        assert.ok(blocksEqual(own[1]!.bytes, 7, mine[1]!.bytes, 3, 1, BB));
      }));
  });
}
