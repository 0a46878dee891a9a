/**
 * The lease table (lease-table.ts) and same-host READs served by the reader itself
 * (direct-read.ts): what the table records, that a READ of granted blocks completes without
 * a message to the owner, and that every case the table cannot decide goes to the owner,
 * which refuses or serves exactly as it does without the table.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { BlockRecords } from '../../src/transfer/block-records.ts';
import { blockChecksums } from '../../src/transfer/checksum.ts';
import { directRead } from '../../src/transfer/direct-read.ts';
import { InThreadTransferAgent, type TransferAgentOptions } from '../../src/transfer/index.ts';
import { exposedRegions, PeerKvMap } from '../../src/transfer/kv-map.ts';
import { LeaseTable, LeaseViews, leaseHash, SLOTS } from '../../src/transfer/lease-table.ts';
import type { TransferHandle } from '../../src/transfer/types.ts';
import { mappableSharedMemory } from '../../src/util/shared-memory.ts';
import { blocksEqual, makeRegion } from './helpers/pattern.ts';
import { until } from './helpers/wait.ts';

setLogLevel('silent');

const BB = 16 << 10;
const N = 16;
const skip = mappableSharedMemory ? false : 'no native addon: KV memory cannot be mapped by a peer';

describe('lease table', () => {
  it('records the checksum of every granted block in every region, once per grant', () => {
    const regions = [makeRegion(0, BB, N, 1), makeRegion(3, BB, N, 2)];
    const table = new LeaseTable(regions);
    const v = LeaseViews.open(table.bytes)!;
    assert.deepEqual(v.regionIds, [0, 3]);
    assert.equal(table.sums(0, 2, 3), null, 'nothing granted yet');
    table.publish('k', [2, 3, 4], '*', Number.POSITIVE_INFINITY);
    for (const [r, region] of regions.entries()) {
      const want = blockChecksums(region.bytes.subarray(2 * BB), BB, 3);
      assert.deepEqual(table.sums(region.id, 2, 3), want);
      assert.deepEqual([...v.sums(r).subarray(2, 5)], want);
    }
    const slot = v.slotOf(3, leaseHash('k'));
    assert.ok(slot >= 0);
    assert.equal(v.peer[slot], 0, "'*' = any peer");
    assert.equal(table.sums(0, 4, 2), null, 'block 5 is not granted');
    assert.ok(
      v.seq.every((s) => s % 2 === 0),
      'no entry is left mid-update',
    );
    table.withdraw('k');
    for (const r of [0, 1]) assert.ok(v.sums(r).every(Number.isNaN), `region index ${r} keeps no checksum`);
    assert.ok(
      v.seq.every((s) => s % 2 === 0),
      'no entry is left mid-update after the withdraw',
    );
  });

  it('gives each grant of a shared block its own slot, up to SLOTS, and clears a block when its last grant ends', () => {
    const table = new LeaseTable([makeRegion(0, BB, N, 1)]);
    const v = LeaseViews.open(table.bytes)!;
    const slotKeys = (b: number) => [...v.key.subarray(b * SLOTS, (b + 1) * SLOTS)].filter((k) => k !== 0);
    table.publish('a', [1, 2], 'D1', 1e15);
    table.publish('b', [2, 3], 'D2', 1e15);
    assert.deepEqual(slotKeys(1), [leaseHash('a')]);
    assert.deepEqual(slotKeys(2).sort(), [leaseHash('a'), leaseHash('b')].sort());
    const slotB = v.slotOf(2, leaseHash('b'));
    assert.equal(v.peer[slotB], leaseHash('D2'));
    table.withdraw('a');
    assert.deepEqual(slotKeys(1), []);
    assert.ok(Number.isNaN(v.sums(0)[1]!), 'an ended lease keeps no checksum');
    assert.deepEqual(slotKeys(2), [leaseHash('b')], 'still covered by b');
    assert.notEqual(table.sums(0, 2, 1), null);
    table.renew('b', 5);
    assert.equal(v.expires[v.slotOf(3, leaseHash('b'))], 5);
    table.withdraw('b');
    assert.deepEqual(slotKeys(2), []);
    assert.equal(table.sums(0, 2, 2), null);
    // More grants of one block than slots: the extra ones are not in the table, but the
    // owner still counts them (its own checksums stay valid until the last one ends).
    for (let i = 0; i <= SLOTS; i++) table.publish(`k${i}`, [5], '*', 1e15);
    assert.equal(slotKeys(5).length, SLOTS);
    assert.equal(v.slotOf(5, leaseHash(`k${SLOTS}`)), -1);
    for (let i = 0; i < SLOTS; i++) table.withdraw(`k${i}`);
    assert.deepEqual(slotKeys(5), []);
    assert.notEqual(table.sums(0, 5, 1), null, `k${SLOTS} still covers block 5`);
    table.publish('c', [3], '*', 1e15);
    table.publish('c', [4], '*', 1e15);
    assert.deepEqual(slotKeys(3), [], 'a key granted again replaces its old blocks');
    assert.deepEqual(slotKeys(4), [leaseHash('c')]);
  });

  it('does not open bytes that are not a lease table', () => {
    assert.equal(LeaseViews.open(new Uint8Array(64)), null);
    assert.equal(LeaseViews.open(new Uint8Array(4)), null);
  });
});

describe('direct READ (same host, owner KV and lease table mapped)', () => {
  async function pair(opts: Partial<TransferAgentOptions> = {}) {
    const base: Partial<TransferAgentOptions> = { backends: ['SHM'], chunkBytes: 4 * BB, ...opts };
    const a = await InThreadTransferAgent.create({ engineId: 'D', ...base });
    const b = await InThreadTransferAgent.create({ engineId: 'P', ...base });
    const ra = makeRegion(0, BB, N, 1);
    const rb = makeRegion(0, BB, N, 2);
    a.registerMemory([ra]);
    b.registerMemory([rb]);
    const remote = a.addRemoteAgent(b.metadata());
    // The first READ opens the connection (the handshake maps the owner's KV and table).
    b.grantRead('warm', { blockIds: [0] });
    const warm = await a.waitFor(
      a.read(remote, [{ localRegion: 0, localFirst: 0, remoteRegion: 0, remoteFirst: 0, count: 1 }], {
        grantKey: 'warm',
      }),
    );
    assert.equal(warm.state, 'DONE', warm.reason);
    b.revokeGrant('warm');
    return { a, b, ra, rb, remote, close: () => Promise.all([a.close(), b.close()]) };
  }

  const desc = (localFirst: number, remoteFirst: number, count: number) => [
    { localRegion: 0, localFirst, remoteRegion: 0, remoteFirst, count },
  ];

  /** The state of a transfer once the microtasks queued by read() have run, before any I/O. */
  async function stateWithoutIo(p: { a: InThreadTransferAgent }, h: TransferHandle) {
    for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => queueMicrotask(resolve));
    return p.a.status(h).state;
  }

  it('completes a READ of granted blocks without a message to the owner', { skip }, async () => {
    const p = await pair();
    p.b.grantRead('r1', { blockIds: [4, 5, 6, 7, 8], peer: 'D' });
    const h = p.a.read(p.remote, desc(2, 4, 5), { grantKey: 'r1', notification: 'r1:done' });
    assert.equal(await stateWithoutIo(p, h), 'DONE', 'no socket round trip took place');
    assert.ok(blocksEqual(p.ra.bytes, 2, p.rb.bytes, 4, 5, BB));
    // The notification still reaches the owner, which frees the blocks on it.
    await until(() => p.b.drainNotifications().some((n) => n.message === 'r1:done'), 'notification');
    // A READ without a key is served by any live grant that covers it for this reader.
    const anyKey = p.a.read(p.remote, desc(9, 6, 2));
    assert.equal(await stateWithoutIo(p, anyKey), 'DONE');
    assert.equal(p.a.getStats().bytesTransferred.length, 3, 'direct READs are counted like others');
    await p.close();
  });

  it('leaves to the owner what the table cannot decide, with the owner’s answers', { skip }, async () => {
    const p = await pair();
    const run = desc(0, 2, 2);
    // Revoked: refused.
    p.b.grantRead('gone', { blockIds: [2, 3] });
    p.b.revokeGrant('gone');
    let h = p.a.read(p.remote, run, { grantKey: 'gone' });
    assert.equal(await stateWithoutIo(p, h), 'PROC', 'the table has no live grant: the owner is asked');
    let s = await p.a.waitFor(h);
    assert.equal(s.state, 'ERR');
    assert.match(s.reason ?? '', /no live read grant 'gone'/);
    // Granted to another engine: refused by the owner.
    p.b.grantRead('other', { blockIds: [2, 3], peer: 'D2' });
    s = await p.a.waitFor(p.a.read(p.remote, run, { grantKey: 'other' }));
    assert.equal(s.state, 'ERR');
    assert.match(s.reason ?? '', /does not cover/);
    p.b.revokeGrant('other');
    // Expired: refused.
    p.b.grantRead('short', { blockIds: [2, 3], expiresAt: Date.now() + 30 });
    await new Promise((resolve) => setTimeout(resolve, 60));
    s = await p.a.waitFor(p.a.read(p.remote, run, { grantKey: 'short' }));
    assert.equal(s.state, 'ERR');
    assert.match(s.reason ?? '', /no live read grant 'short'/);
    // Blocks shared by several grants (a common prefix): each grant is read directly...
    p.b.grantRead('x', { blockIds: [2, 3] });
    p.b.grantRead('y', { blockIds: [3, 4] });
    h = p.a.read(p.remote, run, { grantKey: 'x' });
    assert.equal(await stateWithoutIo(p, h), 'DONE');
    h = p.a.read(p.remote, desc(0, 3, 2), { grantKey: 'y' });
    assert.equal(await stateWithoutIo(p, h), 'DONE');
    // ...without a key, only if one grant covers every block (as the owner requires).
    h = p.a.read(p.remote, desc(0, 2, 3));
    assert.equal(await stateWithoutIo(p, h), 'PROC');
    s = await p.a.waitFor(h);
    assert.equal(s.state, 'ERR');
    assert.match(s.reason ?? '', /no live read grant covers/);
    // ...and a grant beyond the block's slots is served by the owner.
    for (let i = 0; i < SLOTS; i++) p.b.grantRead(`z${i}`, { blockIds: [3] });
    h = p.a.read(p.remote, desc(0, 3, 1), { grantKey: `z${SLOTS - 1}` });
    assert.equal(await stateWithoutIo(p, h), 'PROC', 'block 3 has x, y and z0..: z3 is not in its slots');
    s = await p.a.waitFor(h);
    assert.equal(s.state, 'DONE', s.reason);
    assert.ok(blocksEqual(p.ra.bytes, 0, p.rb.bytes, 3, 1, BB));
    // A key not granted yet: the READ waits at the owner until the grant appears.
    h = p.a.read(p.remote, desc(5, 9, 3), { grantKey: 'later' });
    setTimeout(() => p.b.grantRead('later', { blockIds: [9, 10, 11] }), 20);
    s = await p.a.waitFor(h);
    assert.equal(s.state, 'DONE', s.reason);
    assert.ok(blocksEqual(p.ra.bytes, 5, p.rb.bytes, 9, 3, BB));
    await p.close();
  });

  it('fails a READ of blocks changed after they were granted (the lease was broken)', { skip }, async () => {
    const p = await pair();
    p.b.grantRead('r', { blockIds: [6, 7] });
    p.rb.bytes[7 * BB + 100]! ^= 0x40;
    const s = await p.a.waitFor(p.a.read(p.remote, desc(1, 6, 2), { grantKey: 'r' }));
    assert.equal(s.state, 'ERR');
    assert.equal(s.reason, 'block checksum mismatch');
    assert.deepEqual(s.failedBlockIds, [2], 'only the changed block fails');
    await p.close();
  });

  it('is not offered when KV mapping or direct READs are turned off', { skip }, async () => {
    const p = await pair({ offerKvMapping: false });
    p.b.grantRead('r', { blockIds: [3] });
    const h = p.a.read(p.remote, desc(0, 3, 1), { grantKey: 'r' });
    assert.equal(await stateWithoutIo(p, h), 'PROC');
    assert.equal((await p.a.waitFor(h)).state, 'DONE');
    await p.close();
  });

  it('declines an entry the owner is rewriting, and one that is not live', { skip }, () => {
    const owner = makeRegion(0, BB, N, 5);
    const mine = makeRegion(0, BB, N, 6);
    const table = new LeaseTable([owner]);
    const kv = PeerKvMap.map(exposedRegions([owner]))!;
    const leases = LeaseViews.open(table.bytes)!;
    const source = { kv, leases };
    const reader = { agentName: 'D-rank0', engineId: 'D' };
    const regions = new Map([[0, mine]]);
    const descs = desc(0, 1, 2);
    assert.match(directRead(source, reader, regions, descs, 'k') ?? '', /no live grant/, 'not granted');
    table.publish('k', [1, 2], 'D', Date.now() + 60_000);
    assert.equal(directRead(source, reader, regions, descs, 'k'), null);
    assert.ok(blocksEqual(mine.bytes, 0, owner.bytes, 1, 2, BB));
    assert.match(directRead(source, reader, regions, descs, 'other-key') ?? '', /no live grant/);
    const other = { agentName: 'E-rank0', engineId: 'E' };
    assert.match(directRead(source, other, regions, descs, 'k') ?? '', /no live grant/);
    const seq = new Int32Array(table.bytes.buffer, leases.seq.byteOffset, leases.blocks);
    Atomics.add(seq, 2, 1); // as if the owner were rewriting block 2's entry right now
    assert.match(directRead(source, reader, regions, descs, 'k') ?? '', /changing a grant/);
    Atomics.add(seq, 2, 1);
    assert.equal(directRead(source, reader, regions, descs, 'k'), null);
    owner.bytes[BB + 7]! ^= 1; // the lease broken: block 1 changed after its grant
    assert.match(directRead(source, reader, regions, descs, 'k') ?? '', /checksum differs/);
    kv.close();
  });

  it('checks every block of every region’s runs, and every region’s checksums', { skip }, () => {
    const owners = [makeRegion(0, BB, N, 7), makeRegion(1, BB, N, 8)];
    const mine = new Map([
      [0, makeRegion(0, BB, N, 9)],
      [1, makeRegion(1, BB, N, 10)],
    ]);
    const records = new BlockRecords(new Map(owners.map((r) => [r.id, r])));
    const table = new LeaseTable(owners, records);
    const kv = PeerKvMap.map(exposedRegions(owners))!;
    const source = { kv, leases: LeaseViews.open(table.bytes)! };
    const reader = { agentName: 'D-rank0', engineId: 'D' };
    const run = (region: number, first: number, count: number) => ({
      localRegion: region,
      localFirst: first,
      remoteRegion: region,
      remoteFirst: first,
      count,
    });
    table.publish('k', [1, 2], 'D', Date.now() + 60_000);
    assert.equal(directRead(source, reader, mine, [run(0, 1, 2), run(1, 1, 2)], 'k'), null);
    assert.ok(blocksEqual(mine.get(1)!.bytes, 1, owners[1]!.bytes, 1, 2, BB));
    // Region 1 names a longer run than region 0: its block 3 is not granted.
    assert.match(directRead(source, reader, mine, [run(0, 1, 2), run(1, 1, 3)], 'k') ?? '', /no live grant/);
    // A lease with records of region 0 only: region 1's blocks have no checksum.
    records.record([4, 5], [0]);
    table.publish('r', [4, 5], 'D', Date.now() + 60_000, true);
    assert.equal(directRead(source, reader, mine, [run(0, 4, 2)], 'r'), null);
    assert.match(directRead(source, reader, mine, [run(0, 4, 2), run(1, 4, 2)], 'r') ?? '', /no checksum/);
    kv.close();
  });
});
