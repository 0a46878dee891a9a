/**
 * The GGUF container (version 3, little-endian), as llama.cpp's loader reads it: the magic
 * `GGUF`, the version, the tensor and key–value counts, the typed key–value metadata, one
 * info record per tensor (name, dimensions innermost first, ggml type, offset into the data
 * section), then the tensor data, each tensor starting on `general.alignment` bytes (32).
 *
 * Written here rather than taken from a library: the converter needs only F32 and F16
 * tensors and a handful of value types, and no maintained npm package writes GGUF.
 * node-llama-cpp's own reader (readGgufFileInfo) checks what this writes, in the tests.
 */
import { closeSync, openSync, readSync, writeSync } from 'node:fs';
import { f16BitsToF32, f32ToF16Bits } from '../../src/kv/dtype.ts';

const MAGIC = 0x46554747; // "GGUF" read as a little-endian uint32
const VERSION = 3;
export const DEFAULT_ALIGNMENT = 32;

/** GGUF's metadata value types (their numbers are the file format's). */
export const GgufType = {
  UINT8: 0,
  INT8: 1,
  UINT16: 2,
  INT16: 3,
  UINT32: 4,
  INT32: 5,
  FLOAT32: 6,
  BOOL: 7,
  STRING: 8,
  ARRAY: 9,
  UINT64: 10,
  INT64: 11,
  FLOAT64: 12,
} as const;
export type GgufScalarType = Exclude<(typeof GgufType)[keyof typeof GgufType], 9>;

/** The tensor types this module writes and reads (ggml's numbers). */
export const GgmlType = { F32: 0, F16: 1 } as const;
export type GgmlTypeId = (typeof GgmlType)[keyof typeof GgmlType];

export type GgufScalar = number | bigint | boolean | string;

/** One metadata entry: a scalar, or an array of one scalar type. */
export type GgufKV =
  | { key: string; type: GgufScalarType; value: GgufScalar }
  | { key: string; type: typeof GgufType.ARRAY; itemType: GgufScalarType; value: readonly GgufScalar[] };

export interface GgufTensorToWrite {
  name: string;
  /** Row-major shape, outermost first (as PyTorch and safetensors write it). */
  shape: readonly number[];
  type: GgmlTypeId;
  data: Float32Array;
}

export interface GgufTensorInfo {
  name: string;
  /** GGUF's dimensions: innermost first (the reverse of the row-major shape). */
  dims: number[];
  type: number;
  /** Offset from the start of the data section. */
  offset: number;
}

export interface GgufHeader {
  version: number;
  metadata: Map<string, GgufScalar | GgufScalar[]>;
  tensors: GgufTensorInfo[];
  alignment: number;
  /** File offset of the data section. */
  dataOffset: number;
}

const align = (n: number, to: number): number => Math.ceil(n / to) * to;

function bytesOf(type: GgmlTypeId): number {
  return type === GgmlType.F32 ? 4 : 2;
}

/** Grows as it is written; GGUF integers are little-endian. */
class ByteWriter {
  #buf = Buffer.alloc(1 << 16);
  #len = 0;

  #room(n: number): void {
    if (this.#len + n <= this.#buf.length) return;
    const next = Buffer.alloc(Math.max(this.#buf.length * 2, this.#len + n));
    this.#buf.copy(next, 0, 0, this.#len);
    this.#buf = next;
  }

  u8(v: number): void {
    this.#room(1);
    this.#buf.writeUInt8(v, this.#len);
    this.#len += 1;
  }
  u32(v: number): void {
    this.#room(4);
    this.#buf.writeUInt32LE(v, this.#len);
    this.#len += 4;
  }
  u64(v: number | bigint): void {
    this.#room(8);
    this.#buf.writeBigUInt64LE(BigInt(v), this.#len);
    this.#len += 8;
  }
  string(s: string): void {
    const bytes = Buffer.from(s, 'utf8');
    this.u64(bytes.length);
    this.#room(bytes.length);
    bytes.copy(this.#buf, this.#len);
    this.#len += bytes.length;
  }
  scalar(type: GgufScalarType, v: GgufScalar): void {
    const number = (): number => {
      if (typeof v !== 'number') throw new Error(`gguf: expected a number for type ${type}, got ${typeof v}`);
      return v;
    };
    this.#room(8);
    const b = this.#buf;
    const at = this.#len;
    switch (type) {
      case GgufType.UINT8:
        b.writeUInt8(number(), at);
        this.#len += 1;
        return;
      case GgufType.INT8:
        b.writeInt8(number(), at);
        this.#len += 1;
        return;
      case GgufType.UINT16:
        b.writeUInt16LE(number(), at);
        this.#len += 2;
        return;
      case GgufType.INT16:
        b.writeInt16LE(number(), at);
        this.#len += 2;
        return;
      case GgufType.UINT32:
        b.writeUInt32LE(number(), at);
        this.#len += 4;
        return;
      case GgufType.INT32:
        b.writeInt32LE(number(), at);
        this.#len += 4;
        return;
      case GgufType.FLOAT32:
        b.writeFloatLE(number(), at);
        this.#len += 4;
        return;
      case GgufType.BOOL:
        if (typeof v !== 'boolean') throw new Error(`gguf: expected a boolean, got ${typeof v}`);
        b.writeUInt8(v ? 1 : 0, at);
        this.#len += 1;
        return;
      case GgufType.STRING:
        if (typeof v !== 'string') throw new Error(`gguf: expected a string, got ${typeof v}`);
        this.string(v);
        return;
      case GgufType.UINT64:
        b.writeBigUInt64LE(BigInt(v as number | bigint), at);
        this.#len += 8;
        return;
      case GgufType.INT64:
        b.writeBigInt64LE(BigInt(v as number | bigint), at);
        this.#len += 8;
        return;
      case GgufType.FLOAT64:
        b.writeDoubleLE(number(), at);
        this.#len += 8;
        return;
    }
  }
  padTo(alignment: number): void {
    const target = align(this.#len, alignment);
    this.#room(target - this.#len);
    this.#buf.fill(0, this.#len, target);
    this.#len = target;
  }
  get length(): number {
    return this.#len;
  }
  bytes(): Buffer {
    return this.#buf.subarray(0, this.#len);
  }
}

/** The bytes of one tensor as `type` (F16 rounds to nearest even). */
function tensorBytes(t: GgufTensorToWrite): Buffer {
  if (t.type === GgmlType.F32) return Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  const out = new Uint16Array(t.data.length);
  for (let i = 0; i < t.data.length; i++) out[i] = f32ToF16Bits(t.data[i]!);
  return Buffer.from(out.buffer);
}

/**
 * Writes a GGUF file: metadata in the order given (general.alignment is added when absent),
 * tensors in the order given. Tensor data is written one tensor at a time, so a file larger
 * than the memory for a second copy of the weights can be written.
 */
export function writeGguf(
  file: string,
  metadata: readonly GgufKV[],
  tensors: readonly GgufTensorToWrite[],
): void {
  const kvs = [...metadata];
  const alignKv = kvs.find((kv) => kv.key === 'general.alignment');
  const alignment = alignKv ? Number(alignKv.value) : DEFAULT_ALIGNMENT;
  if (!alignKv) kvs.push({ key: 'general.alignment', type: GgufType.UINT32, value: alignment });
  const seen = new Set<string>();
  for (const kv of kvs) {
    if (seen.has(kv.key)) throw new Error(`gguf: metadata key '${kv.key}' given twice`);
    seen.add(kv.key);
  }

  const w = new ByteWriter();
  w.u32(MAGIC);
  w.u32(VERSION);
  w.u64(tensors.length);
  w.u64(kvs.length);
  for (const kv of kvs) {
    w.string(kv.key);
    w.u32(kv.type);
    if (kv.type === GgufType.ARRAY) {
      w.u32(kv.itemType);
      w.u64(kv.value.length);
      for (const item of kv.value) w.scalar(kv.itemType, item);
    } else {
      w.scalar(kv.type, kv.value);
    }
  }
  let offset = 0;
  for (const t of tensors) {
    const count = t.shape.reduce((a, b) => a * b, 1);
    if (count !== t.data.length) {
      throw new Error(
        `gguf: tensor ${t.name} has ${t.data.length} values, its shape [${t.shape}] holds ${count}`,
      );
    }
    w.string(t.name);
    w.u32(t.shape.length);
    for (const d of [...t.shape].reverse()) w.u64(d);
    w.u32(t.type);
    w.u64(offset);
    offset = align(offset + count * bytesOf(t.type), alignment);
  }
  w.padTo(alignment);

  const fd = openSync(file, 'w');
  try {
    writeSync(fd, w.bytes());
    const zeros = Buffer.alloc(alignment);
    for (const t of tensors) {
      const bytes = tensorBytes(t);
      writeSync(fd, bytes);
      const pad = align(bytes.length, alignment) - bytes.length;
      if (pad > 0) writeSync(fd, zeros, 0, pad);
    }
  } finally {
    closeSync(fd);
  }
}

/** Reads what it is asked for from a file, a chunk at a time. */
class ByteReader {
  readonly #fd: number;
  #chunk: Buffer = Buffer.alloc(0);
  #chunkStart = 0;
  pos = 0;

  constructor(fd: number) {
    this.#fd = fd;
  }

  #take(n: number): Buffer {
    const end = this.pos + n;
    if (this.pos < this.#chunkStart || end > this.#chunkStart + this.#chunk.length) {
      const size = Math.max(n, 1 << 20);
      const buf = Buffer.alloc(size);
      const got = readSync(this.#fd, buf, 0, size, this.pos);
      if (got < n) throw new Error(`gguf: file ends at byte ${this.pos + got}, expected ${n} more bytes`);
      this.#chunk = buf.subarray(0, got);
      this.#chunkStart = this.pos;
    }
    const out = this.#chunk.subarray(this.pos - this.#chunkStart, end - this.#chunkStart);
    this.pos = end;
    return out;
  }
  u32(): number {
    return this.#take(4).readUInt32LE(0);
  }
  u64(): number {
    const v = this.#take(8).readBigUInt64LE(0);
    if (v > BigInt(Number.MAX_SAFE_INTEGER))
      throw new Error(`gguf: count ${v} at byte ${this.pos - 8} is too large`);
    return Number(v);
  }
  string(): string {
    return this.#take(this.u64()).toString('utf8');
  }
  scalar(type: number): GgufScalar {
    switch (type) {
      case GgufType.UINT8:
        return this.#take(1).readUInt8(0);
      case GgufType.INT8:
        return this.#take(1).readInt8(0);
      case GgufType.UINT16:
        return this.#take(2).readUInt16LE(0);
      case GgufType.INT16:
        return this.#take(2).readInt16LE(0);
      case GgufType.UINT32:
        return this.#take(4).readUInt32LE(0);
      case GgufType.INT32:
        return this.#take(4).readInt32LE(0);
      case GgufType.FLOAT32:
        return this.#take(4).readFloatLE(0);
      case GgufType.BOOL:
        return this.#take(1).readUInt8(0) !== 0;
      case GgufType.STRING:
        return this.string();
      case GgufType.UINT64:
        return this.#take(8).readBigUInt64LE(0);
      case GgufType.INT64:
        return this.#take(8).readBigInt64LE(0);
      case GgufType.FLOAT64:
        return this.#take(8).readDoubleLE(0);
      default:
        throw new Error(`gguf: unknown value type ${type} at byte ${this.pos - 4}`);
    }
  }
}

/** The header of a GGUF file: metadata and tensor infos (not the tensor data). */
export function readGgufHeader(file: string): GgufHeader {
  const fd = openSync(file, 'r');
  try {
    const r = new ByteReader(fd);
    const magic = r.u32();
    if (magic !== MAGIC) throw new Error(`gguf: ${file} does not start with GGUF`);
    const version = r.u32();
    if (version !== VERSION)
      throw new Error(`gguf: ${file} is version ${version}, this reader reads ${VERSION}`);
    const tensorCount = r.u64();
    const kvCount = r.u64();
    const metadata = new Map<string, GgufScalar | GgufScalar[]>();
    for (let i = 0; i < kvCount; i++) {
      const key = r.string();
      const type = r.u32();
      if (type === GgufType.ARRAY) {
        const itemType = r.u32();
        const n = r.u64();
        const items: GgufScalar[] = new Array(n);
        for (let j = 0; j < n; j++) items[j] = r.scalar(itemType);
        metadata.set(key, items);
      } else {
        metadata.set(key, r.scalar(type));
      }
    }
    const tensors: GgufTensorInfo[] = [];
    for (let i = 0; i < tensorCount; i++) {
      const name = r.string();
      const nDims = r.u32();
      const dims: number[] = [];
      for (let d = 0; d < nDims; d++) dims.push(r.u64());
      tensors.push({ name, dims, type: r.u32(), offset: r.u64() });
    }
    const alignment = Number(metadata.get('general.alignment') ?? DEFAULT_ALIGNMENT);
    return { version, metadata, tensors, alignment, dataOffset: align(r.pos, alignment) };
  } finally {
    closeSync(fd);
  }
}

/** One F32 or F16 tensor's values as float32, read from the file. */
export function readGgufTensor(file: string, header: GgufHeader, name: string): Float32Array {
  const info = header.tensors.find((t) => t.name === name);
  if (!info) throw new Error(`gguf: ${file} has no tensor ${name}`);
  if (info.type !== GgmlType.F32 && info.type !== GgmlType.F16) {
    throw new Error(`gguf: tensor ${name} has ggml type ${info.type}; this reader reads F32 (0) and F16 (1)`);
  }
  const count = info.dims.reduce((a, b) => a * b, 1);
  const bytes = Buffer.alloc(count * bytesOf(info.type as GgmlTypeId));
  const fd = openSync(file, 'r');
  try {
    const got = readSync(fd, bytes, 0, bytes.length, header.dataOffset + info.offset);
    if (got !== bytes.length) throw new Error(`gguf: tensor ${name} is cut short in ${file}`);
  } finally {
    closeSync(fd);
  }
  if (info.type === GgmlType.F32) return new Float32Array(bytes.buffer, bytes.byteOffset, count).slice();
  const half = new Uint16Array(bytes.buffer, bytes.byteOffset, count);
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) out[i] = f16BitsToF32(half[i]!);
  return out;
}
