/**
 * The layer file of ExampleConnector: a small self-checking binary format (little-endian).
 *
 *   0  magic "KVCF"            4 bytes
 *   4  version                 u16 (1)
 *   6  dtype                   u8  (0 float32, 1 float16, 2 bfloat16)
 *   7  reserved                u8  (0)
 *   8  numTokens               u32 tokens covered (numBlocks × blockSize)
 *  12  numBlocks               u32 ┐
 *  16  blockSize               u32 │ shape [numBlocks][2][blockSize][numKvHeads][headSize]
 *  20  numKvHeads              u32 │
 *  24  headSize                u32 ┘
 *  28  modelNameLength         u16, then 2 reserved bytes
 *  32  modelName               UTF-8
 *      block checksums         u32 CRC-32 per block
 *      header checksum         u32 CRC-32 of every byte above
 *      payload                 numBlocks blocks, each exactly as laid out in the paged memory
 *
 * Each block has its own checksum so a damaged file invalidates only the blocks it damaged.
 */
import { crc32 } from 'node:zlib';
import type { KVCacheDtype } from '../../config/types.ts';
import { dtypeBytes } from '../../kv/dtype.ts';

const MAGIC = 0x4643564b; // "KVCF" read as little-endian u32
export const KV_FILE_VERSION = 1;
const DTYPES: readonly KVCacheDtype[] = ['float32', 'float16', 'bfloat16'];
const FIXED_HEADER_BYTES = 32;

export interface KVFileShape {
  dtype: KVCacheDtype;
  blockSize: number;
  numKvHeads: number;
  headSize: number;
  /** Model name; a file written for another model is not loaded. */
  model: string;
}

export interface KVFileHeader extends KVFileShape {
  version: number;
  numTokens: number;
  numBlocks: number;
  blockChecksums: Uint32Array;
  payloadOffset: number;
  blockBytes: number;
}

export function blockBytesOf(shape: Omit<KVFileShape, 'model'>): number {
  return 2 * shape.blockSize * shape.numKvHeads * shape.headSize * dtypeBytes(shape.dtype);
}

/** Serialises blocks (each one block of one layer, in order) into one layer file. */
export function encodeKVFile(shape: KVFileShape, blocks: readonly Uint8Array[]): Buffer {
  const blockBytes = blockBytesOf(shape);
  const name = Buffer.from(shape.model, 'utf8');
  const headerBytes = FIXED_HEADER_BYTES + name.length + 4 * blocks.length;
  const out = Buffer.alloc(headerBytes + 4 + blockBytes * blocks.length);
  out.writeUInt32LE(MAGIC, 0);
  out.writeUInt16LE(KV_FILE_VERSION, 4);
  out.writeUInt8(DTYPES.indexOf(shape.dtype), 6);
  out.writeUInt32LE(blocks.length * shape.blockSize, 8);
  out.writeUInt32LE(blocks.length, 12);
  out.writeUInt32LE(shape.blockSize, 16);
  out.writeUInt32LE(shape.numKvHeads, 20);
  out.writeUInt32LE(shape.headSize, 24);
  out.writeUInt16LE(name.length, 28);
  name.copy(out, FIXED_HEADER_BYTES);
  let offset = FIXED_HEADER_BYTES + name.length;
  const payloadOffset = headerBytes + 4;
  blocks.forEach((block, i) => {
    if (block.length !== blockBytes) {
      throw new RangeError(`block ${i} has ${block.length} bytes, expected ${blockBytes}`);
    }
    out.writeUInt32LE(crc32(block), offset);
    offset += 4;
    out.set(block, payloadOffset + i * blockBytes);
  });
  out.writeUInt32LE(crc32(out.subarray(0, headerBytes)), headerBytes);
  return out;
}

/** The header, or why the file cannot be trusted at all (a damaged or foreign header). */
export function readKVFileHeader(file: Uint8Array): KVFileHeader | string {
  const buf = Buffer.from(file.buffer, file.byteOffset, file.byteLength);
  if (buf.length < FIXED_HEADER_BYTES + 4) return 'file shorter than its header';
  if (buf.readUInt32LE(0) !== MAGIC) return 'bad magic (not a kvconnect KV file)';
  const version = buf.readUInt16LE(4);
  if (version !== KV_FILE_VERSION) return `unsupported version ${version}`;
  const dtype = DTYPES[buf.readUInt8(6)];
  if (!dtype) return `unknown dtype code ${buf.readUInt8(6)}`;
  const numBlocks = buf.readUInt32LE(12);
  const nameLength = buf.readUInt16LE(28);
  const headerBytes = FIXED_HEADER_BYTES + nameLength + 4 * numBlocks;
  if (buf.length < headerBytes + 4) return 'file shorter than its header';
  if (crc32(buf.subarray(0, headerBytes)) !== buf.readUInt32LE(headerBytes))
    return 'header checksum mismatch';
  const checksumOffset = FIXED_HEADER_BYTES + nameLength;
  const blockChecksums = new Uint32Array(numBlocks);
  for (let i = 0; i < numBlocks; i++) blockChecksums[i] = buf.readUInt32LE(checksumOffset + 4 * i);
  const shape = {
    dtype,
    blockSize: buf.readUInt32LE(16),
    numKvHeads: buf.readUInt32LE(20),
    headSize: buf.readUInt32LE(24),
  };
  return {
    ...shape,
    model: buf.toString('utf8', FIXED_HEADER_BYTES, FIXED_HEADER_BYTES + nameLength),
    version,
    numTokens: buf.readUInt32LE(8),
    numBlocks,
    blockChecksums,
    payloadOffset: headerBytes + 4,
    blockBytes: blockBytesOf(shape),
  };
}

/** Why the file's shape differs from what the reader expects, or null when it matches. */
export function shapeMismatch(header: KVFileHeader, expected: KVFileShape): string | null {
  for (const key of ['model', 'dtype', 'blockSize', 'numKvHeads', 'headSize'] as const) {
    if (header[key] !== expected[key]) return `${key} is ${header[key]} in the file, ${expected[key]} here`;
  }
  return null;
}

/** The bytes of block `index`, or null when they are missing (truncated) or fail their checksum. */
export function readBlock(file: Uint8Array, header: KVFileHeader, index: number): Uint8Array | null {
  if (index < 0 || index >= header.numBlocks) return null;
  const start = header.payloadOffset + index * header.blockBytes;
  const end = start + header.blockBytes;
  if (end > file.length) return null;
  const block = file.subarray(start, end);
  return crc32(block) === header.blockChecksums[index] ? block : null;
}
