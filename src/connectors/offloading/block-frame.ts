/**
 * The bytes a secondary tier stores for one chunk: a 16-byte header (magic, CRC-32 of the
 * key, payload length, CRC-32 of the payload) followed by the raw KV bytes. A value whose
 * header does not match its key, its length or its checksum is never trusted.
 */
import { crc32 } from 'node:zlib';

const MAGIC = 0x4b564f31; // "KVO1"
export const FRAME_HEADER_BYTES = 16;

export function encodeFrame(key: string, payload: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + payload.byteLength);
  out.writeUInt32BE(MAGIC, 0);
  out.writeUInt32BE(crc32(key), 4);
  out.writeUInt32BE(payload.byteLength, 8);
  out.writeUInt32BE(crc32(payload), 12);
  out.set(payload, FRAME_HEADER_BYTES);
  return out;
}

/**
 * Whether the first FRAME_HEADER_BYTES of a stored value belong to `key` and announce
 * exactly `totalBytes` bytes (header included): a cheap check that needs only the header.
 */
export function frameHeaderMatches(key: string, header: Uint8Array, totalBytes: number): boolean {
  if (header.byteLength < FRAME_HEADER_BYTES) return false;
  const view = new DataView(header.buffer, header.byteOffset, FRAME_HEADER_BYTES);
  return (
    view.getUint32(0) === MAGIC &&
    view.getUint32(4) === crc32(key) &&
    view.getUint32(8) === totalBytes - FRAME_HEADER_BYTES
  );
}

/** The payload (a view, no copy), or null when the frame is truncated, foreign or corrupt. */
export function decodeFrame(key: string, frame: Uint8Array): Uint8Array | null {
  if (frame.byteLength < FRAME_HEADER_BYTES) return null;
  const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
  if (view.getUint32(0) !== MAGIC || view.getUint32(4) !== crc32(key)) return null;
  const length = view.getUint32(8);
  if (length !== frame.byteLength - FRAME_HEADER_BYTES) return null;
  const payload = frame.subarray(FRAME_HEADER_BYTES);
  return crc32(payload) === view.getUint32(12) ? payload : null;
}
