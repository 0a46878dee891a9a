import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import {
  blockChecksum,
  blockChecksums,
  checksumImplementation,
  copyAndChecksum,
  wasmChecksum,
} from '../../src/transfer/checksum.ts';
import { referenceHash } from '../../src/transfer/checksum-reference.ts';
import { nativeShm } from '../../src/transfer/native-shm.ts';

const bytesArb = fc.uint8Array({ minLength: 1, maxLength: 3000 });
const addonHashes = typeof (nativeShm as { hash?: unknown } | null)?.hash === 'function';
const checksumModule = fileURLToPath(new URL('../../src/transfer/checksum.ts', import.meta.url));

/** Random bytes at a random offset of a SharedArrayBuffer (how KV memory is held). */
function sharedCopy(bytes: Uint8Array, shift: number): Uint8Array {
  const view = new Uint8Array(new SharedArrayBuffer(bytes.length + shift + 5), shift, bytes.length);
  view.set(bytes);
  return view;
}

/** checksumImplementation and the checksum of 0..n-1 (mod 256) in a child with `env`. */
function childChecksum(env: Record<string, string>, n: number): { impl: string; sum: number } {
  const script = `const m = await import(${JSON.stringify(checksumModule)});
const b = new Uint8Array(${n}); for (let i = 0; i < b.length; i++) b[i] = i * 7;
console.log(JSON.stringify({ impl: m.checksumImplementation, sum: m.blockChecksum(b) }));`;
  const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    env: { ...process.env, ...env },
    encoding: 'utf8',
  });
  return JSON.parse(out.trim().split('\n').at(-1) ?? '') as { impl: string; sum: number };
}

describe('block checksum', () => {
  it('hashes in place with the native addon when it is built, else as WebAssembly SIMD', () => {
    const disabled = process.env['KVCONNECT_DISABLE_NATIVE_HASH'] === '1';
    assert.equal(checksumImplementation, addonHashes && !disabled ? 'native' : 'wasm-simd');
  });

  it('native, WASM and plain-JS agree on shared memory (any length, offset, contents)', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 0, maxLength: 3000 }), fc.nat(7), (bytes, shift) => {
        const view = sharedCopy(bytes, shift);
        const ref = referenceHash(bytes);
        assert.equal(blockChecksum(view), ref);
        assert.equal(wasmChecksum(view), ref);
        assert.equal(referenceHash(view), ref);
      }),
      { numRuns: 300 },
    );
  });

  it('native, WASM and plain-JS agree on blocks over 64 KiB with odd tails', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 64 << 10, max: 200 << 10 }),
        fc.nat(15),
        fc.integer(),
        (length, shift, seed) => {
          const bytes = new Uint8Array(length);
          let x = seed | 1;
          for (let i = 0; i < length; i++) {
            x ^= x << 13;
            x ^= x >>> 17;
            x ^= x << 5;
            bytes[i] = x;
          }
          const view = sharedCopy(bytes, shift);
          const ref = referenceHash(bytes);
          assert.equal(blockChecksum(view), ref);
          assert.equal(wasmChecksum(view), ref);
        },
      ),
      { numRuns: 25 },
    );
  });

  it('the batch form equals one checksum per block, and falls back when the view is short', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 700 }),
        fc.integer({ min: 0, max: 80 }),
        fc.nat(3),
        (blockBytes, count, shift) => {
          const bytes = new Uint8Array(blockBytes * count + 9).map((_, i) => (i * 131) ^ count);
          const view = sharedCopy(bytes, shift);
          const expected = Array.from({ length: count }, (_, i) =>
            referenceHash(bytes.subarray(i * blockBytes, (i + 1) * blockBytes)),
          );
          assert.deepEqual(blockChecksums(view, blockBytes, count), expected);
        },
      ),
      { numRuns: 100 },
    );
    const short = new Uint8Array(1000).fill(3);
    assert.deepEqual(blockChecksums(short, 400, 3), [
      referenceHash(short.subarray(0, 400)),
      referenceHash(short.subarray(400, 800)),
      referenceHash(short.subarray(800, 1000)),
    ]);
  });

  it('KVCONNECT_DISABLE_NATIVE_HASH=1 and KVCONNECT_DISABLE_NATIVE=1 select WASM, same values', () => {
    const n = 70_001;
    const b = new Uint8Array(n).map((_, i) => i * 7);
    const expected = referenceHash(b);
    assert.deepEqual(childChecksum({ KVCONNECT_DISABLE_NATIVE_HASH: '1' }, n), {
      impl: 'wasm-simd',
      sum: expected,
    });
    assert.deepEqual(childChecksum({ KVCONNECT_DISABLE_NATIVE: '1' }, n), {
      impl: 'wasm-simd',
      sum: expected,
    });
    const plain = childChecksum({ KVCONNECT_DISABLE_NATIVE_HASH: '0', KVCONNECT_DISABLE_NATIVE: '0' }, n);
    assert.equal(plain.impl, addonHashes ? 'native' : 'wasm-simd');
    assert.equal(plain.sum, expected);
  });

  it('copy-and-hash copies exactly and gives the reference sums (block pairs, odd counts, tails, any alignment)', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(64, 128, 200, 4096, 4096 + 100, 65536),
        fc.integer({ min: 1, max: 7 }),
        fc.constantFrom(0, 0, 1, 32, 64),
        fc.integer(),
        (blockBytes, count, dstShift, seed) => {
          const src = sharedCopy(
            new Uint8Array(blockBytes * count).map((_, i) => (i * 2654435761 + seed) >>> 13),
            0,
          );
          const dst = new Uint8Array(
            new SharedArrayBuffer(blockBytes * count + 64),
            dstShift,
            blockBytes * count,
          );
          const expected = Array.from({ length: count }, (_, i) =>
            referenceHash(src.subarray(i * blockBytes, (i + 1) * blockBytes)),
          );
          assert.deepEqual(copyAndChecksum(dst, src, blockBytes, count), expected);
          assert.ok(Buffer.from(dst).equals(Buffer.from(src)));
          assert.deepEqual(blockChecksums(src, blockBytes, count), expected);
        },
      ),
      { numRuns: 60 },
    );
  });

  it('KVCONNECT_DISABLE_AVX512=1 (AVX2 steps) gives the same sums for hash and copy-and-hash', () => {
    const script = `const m = await import(${JSON.stringify(checksumModule)});
const out = {};
for (const [bb, n, shift] of [[65536, 3, 0], [4196, 2, 0], [4096, 5, 1], [100, 3, 32]]) {
  const src = new Uint8Array(bb * n); for (let i = 0; i < src.length; i++) src[i] = (i * 31) ^ (i >> 9);
  const dst = new Uint8Array(new ArrayBuffer(bb * n + 64), shift, bb * n);
  out[bb] = [m.blockChecksums(src, bb, n), m.copyAndChecksum(dst, src, bb, n), Buffer.from(dst).equals(Buffer.from(src))];
}
console.log(JSON.stringify(out));`;
    const got = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      env: { ...process.env, KVCONNECT_DISABLE_AVX512: '1' },
      encoding: 'utf8',
    });
    const sums = JSON.parse(got.trim().split('\n').at(-1) ?? '') as Record<
      string,
      [number[], number[], boolean]
    >;
    for (const [bb, n] of [
      [65536, 3],
      [4196, 2],
      [4096, 5],
      [100, 3],
    ] as const) {
      const src = new Uint8Array(bb * n).map((_, i) => (i * 31) ^ (i >> 9));
      const expected = Array.from({ length: n }, (_, i) => referenceHash(src.subarray(i * bb, (i + 1) * bb)));
      assert.deepEqual(sums[bb], [expected, expected, true], `${n} blocks of ${bb} bytes`);
    }
  });

  it('WASM and plain-JS implementations agree (any length, any alignment)', () => {
    fc.assert(
      fc.property(bytesArb, fc.nat(7), (bytes, shift) => {
        const shifted = new Uint8Array(bytes.length + shift).subarray(shift);
        shifted.set(bytes);
        const h = blockChecksum(shifted);
        assert.equal(h, referenceHash(shifted));
        assert.ok(Number.isSafeInteger(h) && h >= 0);
      }),
    );
  });

  it('agrees across blocks larger than the 64 KiB scratch area', () => {
    const big = new Uint8Array((64 << 10) * 2 + 333);
    for (let i = 0; i < big.length; i++) big[i] = (i * 2654435761) >>> 24;
    assert.equal(blockChecksum(big), referenceHash(big));
    const sums = blockChecksums(big, 4096, 3);
    assert.deepEqual(
      sums,
      [0, 1, 2].map((i) => referenceHash(big.subarray(i * 4096, (i + 1) * 4096))),
    );
  });

  it('detects every single corrupted byte (all implementations)', () => {
    fc.assert(
      fc.property(bytesArb, fc.nat(), fc.integer({ min: 1, max: 255 }), (bytes, at, flip) => {
        const i = at % bytes.length;
        const before = blockChecksum(bytes);
        const ref = referenceHash(bytes);
        const viaWasm = wasmChecksum(bytes);
        const bad = bytes.slice();
        bad[i] = bad[i]! ^ flip;
        assert.notEqual(blockChecksum(bad), before);
        assert.notEqual(referenceHash(bad), ref);
        assert.notEqual(wasmChecksum(bad), viaWasm);
      }),
      { numRuns: 300 },
    );
  });

  it('detects torn reads: a zeroed or stale range, a truncated tail, swapped stripes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 256, maxLength: 4096 }), fc.nat(), fc.nat(), (bytes, a, b) => {
        fc.pre(bytes.some((x) => x !== 0));
        const h = blockChecksum(bytes);
        const start = a % bytes.length;
        const end = start + 1 + (b % (bytes.length - start));
        const zeroed = bytes.slice();
        zeroed.fill(0, start, end);
        if (!zeroed.every((x, i) => x === bytes[i])) assert.notEqual(blockChecksum(zeroed), h);
        const truncated = bytes.subarray(0, start);
        assert.notEqual(blockChecksum(truncated), h);
        const swapped = bytes.slice();
        swapped.copyWithin(0, 128, 256);
        swapped.set(bytes.subarray(0, 128), 128);
        if (!swapped.every((x, i) => x === bytes[i])) assert.notEqual(blockChecksum(swapped), h);
      }),
      { numRuns: 300 },
    );
  });

  it('gives different checksums to different blocks of random data', () => {
    const seen = new Set<number>();
    const block = new Uint8Array(4096);
    for (let k = 0; k < 2000; k++) {
      new DataView(block.buffer).setUint32(k % 1024, k * 2654435761);
      seen.add(blockChecksum(block));
    }
    assert.equal(seen.size, 2000);
  });
});
