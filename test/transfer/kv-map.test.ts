/**
 * Same-host transfers from the peer's mapped KV memory (kv-map.ts): one copy, no ring, and
 * what the mapping allows and refuses. The conformance suite runs every agent case over this
 * path too; these tests prove it is the path taken.
 */
import assert from 'node:assert/strict';
import { closeSync, openSync, writeSync } from 'node:fs';
import { describe, it } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { blockChecksums, copyAndChecksum } from '../../src/transfer/checksum.ts';
import {
  InThreadTransferAgent,
  isMappableRegion,
  type TransferAgentOptions,
} from '../../src/transfer/index.ts';
import { exposedRegions, PeerKvMap } from '../../src/transfer/kv-map.ts';
import { allocateShared, mappableSharedMemory } from '../../src/util/shared-memory.ts';
import { residentBytes } from '../helpers/resident.ts';
import { blocksEqual, fillPattern, makeRegion } from './helpers/pattern.ts';

setLogLevel('silent');

const BB = 64 << 10;
const N = 32;
const expectNative = process.env['KVCONNECT_EXPECT_NATIVE'] === '1';
const skip = mappableSharedMemory ? false : 'no native addon: KV memory is a plain SharedArrayBuffer';

describe('same-host KV mapping', () => {
  it('is available where the native addon is expected (KVCONNECT_EXPECT_NATIVE=1)', () => {
    if (expectNative) assert.equal(mappableSharedMemory, true, 'allocateShared must return mappable memory');
    const plain = new Uint8Array(new SharedArrayBuffer(BB));
    assert.equal(isMappableRegion(plain), false);
    assert.equal(isMappableRegion(new Uint8Array(allocateShared(BB))), mappableSharedMemory);
  });

  /**
   * A 64 KiB ring cannot hold a 256 KiB chunk: through the ring these transfers fail, so
   * their success shows the bytes went straight from one KV memory to the other.
   */
  async function tinyRingPair(offerKvMapping: boolean, plainMemory = false) {
    const opts: Partial<TransferAgentOptions> = {
      backends: ['SHM'],
      ringBytes: 64 << 10,
      chunkBytes: 4 * BB,
      offerKvMapping,
    };
    const a = await InThreadTransferAgent.create({ engineId: 'A', ...opts });
    const b = await InThreadTransferAgent.create({ engineId: 'B', ...opts });
    const region = (seed: number) => {
      if (!plainMemory) return makeRegion(0, BB, N, seed);
      const bytes = new Uint8Array(new SharedArrayBuffer(BB * N));
      fillPattern(bytes, BB, seed);
      return { id: 0, bytes, blockBytes: BB, numBlocks: N };
    };
    const ra = region(1);
    const rb = region(2);
    a.registerMemory([ra]);
    b.registerMemory([rb]);
    b.grantRead('r', { blockIds: [...Array(N).keys()] });
    b.grantWrite('w', { blockIds: [...Array(N).keys()] });
    const remote = a.addRemoteAgent(b.metadata());
    return { a, b, ra, rb, remote, close: () => Promise.all([a.close(), b.close()]) };
  }

  it('moves READ and WRITE chunks without the ring when both sides map KV memory', { skip }, async () => {
    const p = await tinyRingPair(true);
    const read = await p.a.waitFor(
      p.a.read(p.remote, [{ localRegion: 0, localFirst: 1, remoteRegion: 0, remoteFirst: 9, count: 12 }]),
    );
    assert.equal(read.state, 'DONE', read.reason);
    assert.ok(blocksEqual(p.ra.bytes, 1, p.rb.bytes, 9, 12, BB));
    const write = await p.a.waitFor(
      p.a.write(p.remote, [{ localRegion: 0, localFirst: 20, remoteRegion: 0, remoteFirst: 2, count: 10 }]),
    );
    assert.equal(write.state, 'DONE', write.reason);
    assert.ok(blocksEqual(p.ra.bytes, 20, p.rb.bytes, 2, 10, BB));
    await p.close();
  });

  it('uses the ring when mapping is not offered, or the memory cannot be mapped', { skip }, async () => {
    for (const [offer, plain] of [
      [false, false],
      [true, true],
    ] as const) {
      const p = await tinyRingPair(offer, plain);
      const read = await p.a.waitFor(
        p.a.read(p.remote, [{ localRegion: 0, localFirst: 1, remoteRegion: 0, remoteFirst: 9, count: 4 }]),
      );
      assert.equal(read.state, 'ERR', `offer=${offer} plain=${plain}: the chunk had to go through the ring`);
      assert.match(read.reason ?? '', /exceeds the .*ring|connection/);
      await p.close();
    }
  });

  it('offers only mappable regions and maps them read-only, sealed against writes and resizing', {
    skip,
  }, () => {
    const kv = makeRegion(3, BB, 4, 5);
    const plain = {
      id: 4,
      bytes: new Uint8Array(new SharedArrayBuffer(BB * 4)),
      blockBytes: BB,
      numBlocks: 4,
    };
    const offered = exposedRegions([kv, plain]);
    assert.deepEqual(
      offered.map((r) => r.region),
      [3],
    );
    const o = offered[0]!;
    assert.equal(o.pid, process.pid);
    assert.equal(o.length, 4 * BB);
    // Anyone who opens the file for writing still cannot change the bytes or its size.
    const fd = openSync(`/proc/${o.pid}/fd/${o.fd}`, 'r+');
    try {
      assert.throws(() => writeSync(fd, Buffer.from('x'), 0, 1, o.offset), /EPERM/);
    } finally {
      closeSync(fd);
    }
    const map = PeerKvMap.map(offered);
    assert.ok(map);
    assert.deepEqual(map.regions, [3]);
    const view = map.view(3, BB, BB)!;
    assert.ok(Buffer.from(view).equals(kv.bytes.subarray(BB, 2 * BB)), 'the mapping shows the owner’s bytes');
    kv.bytes[BB] = kv.bytes[BB]! ^ 0xff;
    assert.equal(view[0], kv.bytes[BB], 'and follows its writes (same pages)');
    assert.equal(map.view(3, 3 * BB, 2 * BB), null, 'nothing past the region');
    assert.equal(map.view(4, 0, BB), null, 'nor a region that was not offered');
    map.close();
    // A forged offer (right pid and fd, wrong identity) is not mapped.
    assert.equal(PeerKvMap.map([{ ...o, ino: o.ino + 1 }]), null);
  });

  it('maps the owner’s pages up front: a peer’s view is resident before it reads a byte', { skip }, () => {
    // The owner's region (filled, so every page exists), of a size no other mapping has.
    const kv = makeRegion(6, BB, 37, 11);
    const [offer] = exposedRegions([kv]);
    assert.ok(offer);
    const map = PeerKvMap.map([offer]);
    assert.ok(map);
    try {
      assert.equal(residentBytes(offer.size, 'r--s'), offer.size, 'the read-only view is mapped in full');
    } finally {
      map.close();
    }
  });

  it('copies and checksums in one pass, with the values of the plain checksum', () => {
    const src = new Uint8Array(allocateShared(5 * BB));
    fillPattern(src, BB, 8);
    const dst = new Uint8Array(new SharedArrayBuffer(5 * BB));
    const sums = copyAndChecksum(dst, src, BB, 5);
    assert.ok(Buffer.from(dst).equals(src));
    assert.deepEqual(sums, blockChecksums(src, BB, 5));
    const odd = 4096 + 100;
    assert.deepEqual(
      copyAndChecksum(new Uint8Array(2 * odd), src.subarray(0, 2 * odd), odd, 2),
      blockChecksums(src, odd, 2),
    );
  });
});
