import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { blockChecksum, blockChecksums, checksumImplementation } from '../../src/transfer/checksum.ts';
import { referenceHash } from '../../src/transfer/checksum-reference.ts';

const bytesArb = fc.uint8Array({ minLength: 1, maxLength: 3000 });

describe('block checksum', () => {
  it('runs as WebAssembly SIMD on Node 20', () => {
    assert.equal(checksumImplementation, 'wasm-simd');
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

  it('detects every single corrupted byte (both implementations)', () => {
    fc.assert(
      fc.property(bytesArb, fc.nat(), fc.integer({ min: 1, max: 255 }), (bytes, at, flip) => {
        const i = at % bytes.length;
        const before = blockChecksum(bytes);
        const ref = referenceHash(bytes);
        const bad = bytes.slice();
        bad[i] = bad[i]! ^ flip;
        assert.notEqual(blockChecksum(bad), before);
        assert.notEqual(referenceHash(bad), ref);
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
