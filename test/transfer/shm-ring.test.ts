import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync, truncateSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { blockChecksum } from '../../src/transfer/checksum.ts';
import { type KvShmBinding, nativeShm, shmRingImplementation } from '../../src/transfer/native-shm.ts';
import { ShmRingReader, ShmRingWriter } from '../../src/transfer/shm-ring.ts';
import { fillPattern } from './helpers/pattern.ts';

const dir = mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'kvconnect-test-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const impl = shmRingImplementation();
const BB = 4096;

describe('shm ring implementation', () => {
  it('uses the native ring when the build is expected (KVCONNECT_EXPECT_NATIVE=1)', () => {
    if (process.env['KVCONNECT_EXPECT_NATIVE'] === '1') {
      assert.equal(impl.native, true, `native shm addon expected but not loaded: ${impl.reason}`);
    }
    assert.equal(impl.native, nativeShm !== null);
    assert.ok(impl.reason.length > 0);
    if (!impl.native) assert.notEqual(impl.reason, 'loaded');
  });

  it('moves blocks through a ring and hashes them in the copy (either implementation)', async () => {
    const writer = new ShmRingWriter(dir, 64 * BB);
    const reader = new ShmRingReader(writer.path);
    writer.unlink();
    assert.equal(writer.mapped, impl.native);
    assert.equal(reader.mapped, impl.native);
    const src = new Uint8Array(new SharedArrayBuffer(8 * BB));
    fillPattern(src, BB, 4);
    const at = await writer.put([src.subarray(0, 3 * BB)], 3 * BB);
    const dest = new Uint8Array(new SharedArrayBuffer(8 * BB));
    const progress: number[] = [];
    assert.equal(
      reader.read(dest.subarray(0, 3 * BB), at, BB, (f) => progress.push(f)),
      3 * BB,
    );
    assert.deepEqual(progress, [BB, 2 * BB, 3 * BB]);
    assert.ok(Buffer.from(dest.subarray(0, 3 * BB)).equals(src.subarray(0, 3 * BB)));
    if (writer.mapped) {
      const { offset, sums } = await writer.putHashed(src.subarray(3 * BB), BB, 5);
      assert.deepEqual(
        sums,
        Array.from({ length: 5 }, (_, i) => blockChecksum(src.subarray((3 + i) * BB, (4 + i) * BB))),
      );
      assert.equal(reader.read(dest.subarray(3 * BB), offset, BB), 5 * BB);
      assert.ok(Buffer.from(dest).equals(src));
    }
    // A location outside the ring is a short read, never an out-of-bounds access.
    assert.ok(reader.read(dest.subarray(0, 2 * BB), 63 * BB, BB) < 2 * BB);
    writer.close();
    reader.close();
    assert.deepEqual(
      readdirSync(dir).filter((f) => f.endsWith('.ring')),
      [],
    );
  });

  it('a writer waits for ring space until the reader releases chunks', async () => {
    const writer = new ShmRingWriter(dir, 4 * BB);
    const block = new Uint8Array(2 * BB).fill(7);
    await writer.put([block], block.length);
    await writer.put([block], block.length);
    let placed = false;
    const third = writer.put([block], block.length).then((o) => {
      placed = true;
      return o;
    });
    await new Promise((r) => setImmediate(r));
    assert.equal(placed, false);
    writer.release(1);
    assert.equal(await third, 0);
    writer.close();
    await assert.rejects(writer.put([block], block.length), /closed/);
  });
});

describe('native shm addon', { skip: !impl.native && `not loaded: ${impl.reason}` }, () => {
  const binding = nativeShm as KvShmBinding;

  it('maps one file into two views that share bytes, and release empties the views', () => {
    const path = join(dir, 'shared.ring');
    const w = new Uint8Array(binding.map(path, 1 << 20, true));
    const r = new Uint8Array(binding.map(path, 1 << 20, false));
    rmSync(path);
    w[12345] = 99;
    assert.equal(r[12345], 99);
    binding.release(w.buffer as ArrayBuffer);
    binding.release(r.buffer as ArrayBuffer);
    assert.equal(w.length, 0);
    assert.equal(r.length, 0);
  });

  it('refuses a file smaller than the mapping, an existing file on create, and bad arguments', () => {
    const path = join(dir, 'short.ring');
    const w = binding.map(path, 1 << 16, true);
    assert.throws(() => binding.map(path, 1 << 16, true), /File exists/);
    truncateSync(path, 4096);
    assert.throws(() => binding.map(path, 1 << 16, false), /smaller than the ring/);
    assert.throws(() => binding.map(join(dir, 'missing.ring'), 4096, false), /No such file/);
    assert.throws(() => binding.map(path, -1, false), RangeError);
    assert.throws(() => (binding.map as (...a: unknown[]) => unknown)(path), TypeError);
    binding.release(w);
    rmSync(path);
  });

  it('loads through createRequire from the path the agent uses', () => {
    const mod = createRequire(import.meta.url)('../../native/build/Release/kvshm.node') as KvShmBinding;
    assert.equal(typeof mod.map, 'function');
  });
});
