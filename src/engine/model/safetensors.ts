/**
 * Reader and writer of the safetensors format: an 8-byte little-endian header length, a
 * JSON header (name → dtype, shape, data_offsets), then the raw tensor bytes. Every
 * offset and size is checked before it is used; a bad file is a KVError naming the file.
 */
import { closeSync, fstatSync, openSync, readSync, writeFileSync } from 'node:fs';
import { KVError } from '../../errors/index.ts';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../../kv/dtype.ts';

export type SafetensorsDtype = 'F32' | 'F16' | 'BF16';

const DTYPE_BYTES: Record<SafetensorsDtype, number> = { F32: 4, F16: 2, BF16: 2 };
const MAX_HEADER_BYTES = 100 * 1024 * 1024;

export interface SafetensorsTensor {
  readonly dtype: SafetensorsDtype;
  readonly shape: readonly number[];
  /** Raw little-endian bytes of the tensor (a view into the file's buffer). */
  readonly bytes: Uint8Array;
}

export interface TensorToWrite {
  dtype: SafetensorsDtype;
  shape: readonly number[];
  data: Float32Array;
}

function malformed(file: string, problem: string): KVError {
  return new KVError('SAFETENSORS_INVALID', `Invalid safetensors file ${file}: ${problem}`, {
    hint: 'The file is truncated or not a safetensors file; re-export or re-download the checkpoint.',
    details: { file },
  });
}

interface Entry {
  name: string;
  dtype: SafetensorsDtype;
  shape: number[];
  /** Byte range in the data section (after the header). */
  begin: number;
  end: number;
}

function notReadable(file: string, cause: unknown): KVError {
  return new KVError('MODEL_FILE_NOT_FOUND', `Cannot read safetensors file ${file}`, {
    hint: 'Check that the model directory contains its safetensors files and that they are readable.',
    cause,
  });
}

export interface SafetensorsEntry {
  readonly dtype: SafetensorsDtype;
  readonly shape: readonly number[];
  /** Reads this tensor's bytes from the file (each call reads again; nothing is cached). */
  read(): SafetensorsTensor;
}

function withFile<T>(file: string, body: (fd: number) => T): T {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (cause) {
    throw notReadable(file, cause);
  }
  try {
    return body(fd);
  } catch (cause) {
    if (cause instanceof KVError) throw cause;
    throw notReadable(file, cause);
  } finally {
    closeSync(fd);
  }
}

function readFully(fd: number, bytes: Buffer, position: number, file: string, name: string): void {
  for (let done = 0; done < bytes.length; ) {
    const got = readSync(fd, bytes, done, bytes.length - done, position + done);
    if (got === 0) throw malformed(file, `tensor '${name}' is cut short`);
    done += got;
  }
}

/**
 * The tensors of a file from its header alone; each entry reads its own bytes on demand. A
 * loader can so hold one tensor at a time, and files over 2 GiB (Node.js's limit for one
 * read) load.
 */
export function indexSafetensorsFile(file: string): Map<string, SafetensorsEntry> {
  const { entries, dataStart } = withFile(file, (fd) => {
    const size = fstatSync(fd).size;
    if (size < 8) throw malformed(file, `file is ${size} bytes, shorter than the 8-byte header length`);
    const prefix = Buffer.alloc(8);
    readFully(fd, prefix, 0, file, '(header)');
    const headerLen = prefix.readBigUInt64LE(0);
    if (headerLen > BigInt(Math.min(MAX_HEADER_BYTES, size - 8))) {
      throw malformed(file, `header length ${headerLen} exceeds the file size ${size}`);
    }
    const n = Number(headerLen);
    const header = Buffer.alloc(n);
    readFully(fd, header, 8, file, '(header)');
    return { entries: parseHeader(header, size - 8 - n, file), dataStart: 8 + n };
  });
  const index = new Map<string, SafetensorsEntry>();
  for (const e of entries) {
    index.set(e.name, {
      dtype: e.dtype,
      shape: e.shape,
      read: () =>
        withFile(file, (fd) => {
          const bytes = Buffer.allocUnsafe(e.end - e.begin);
          readFully(fd, bytes, dataStart + e.begin, file, e.name);
          return {
            dtype: e.dtype,
            shape: e.shape,
            bytes: new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length),
          };
        }),
    });
  }
  return index;
}

export function readSafetensorsFile(file: string): Map<string, SafetensorsTensor> {
  const tensors = new Map<string, SafetensorsTensor>();
  for (const [name, entry] of indexSafetensorsFile(file)) tensors.set(name, entry.read());
  return tensors;
}

export function parseSafetensors(data: Uint8Array, file: string): Map<string, SafetensorsTensor> {
  if (data.byteLength < 8)
    throw malformed(file, `file is ${data.byteLength} bytes, shorter than the 8-byte header length`);
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const headerLen = view.getBigUint64(0, true);
  if (headerLen > BigInt(Math.min(MAX_HEADER_BYTES, data.byteLength - 8))) {
    throw malformed(file, `header length ${headerLen} exceeds the file size ${data.byteLength}`);
  }
  const n = Number(headerLen);
  const body = data.subarray(8 + n);
  const tensors = new Map<string, SafetensorsTensor>();
  for (const e of parseHeader(data.subarray(8, 8 + n), body.byteLength, file)) {
    tensors.set(e.name, { dtype: e.dtype, shape: e.shape, bytes: body.subarray(e.begin, e.end) });
  }
  return tensors;
}

function parseHeader(bytes: Uint8Array, bodyLength: number, file: string): Entry[] {
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch {
    throw malformed(file, 'header is not valid UTF-8 JSON');
  }
  if (header === null || typeof header !== 'object' || Array.isArray(header)) {
    throw malformed(file, 'header is not a JSON object');
  }
  const entries: Entry[] = [];
  for (const [name, raw] of Object.entries(header as Record<string, unknown>)) {
    if (name !== '__metadata__') entries.push(parseEntry(file, name, raw, bodyLength));
  }
  return entries;
}

function parseEntry(file: string, name: string, raw: unknown, bodyLength: number): Entry {
  if (raw === null || typeof raw !== 'object') throw malformed(file, `entry '${name}' is not an object`);
  const { dtype, shape, data_offsets: offsets } = raw as Record<string, unknown>;
  if (dtype !== 'F32' && dtype !== 'F16' && dtype !== 'BF16') {
    throw malformed(
      file,
      `tensor '${name}' has unsupported dtype ${JSON.stringify(dtype)} (supported: F32, F16, BF16)`,
    );
  }
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    throw malformed(file, `tensor '${name}' has an invalid shape ${JSON.stringify(shape)}`);
  }
  if (
    !Array.isArray(offsets) ||
    offsets.length !== 2 ||
    !offsets.every((o) => Number.isSafeInteger(o) && o >= 0) ||
    offsets[0] > offsets[1]
  ) {
    throw malformed(file, `tensor '${name}' has invalid data_offsets ${JSON.stringify(offsets)}`);
  }
  const [begin, end] = offsets as [number, number];
  if (end > bodyLength) {
    throw malformed(
      file,
      `tensor '${name}' data [${begin}, ${end}) runs past the end of the data (${bodyLength} bytes)`,
    );
  }
  const numel = (shape as number[]).reduce((a, b) => a * b, 1);
  if (end - begin !== numel * DTYPE_BYTES[dtype]) {
    throw malformed(
      file,
      `tensor '${name}' has ${end - begin} bytes but shape ${JSON.stringify(shape)} of ${dtype} needs ${numel * DTYPE_BYTES[dtype]}`,
    );
  }
  return { name, dtype, shape: shape as number[], begin, end };
}

export function tensorToFloat32(t: SafetensorsTensor): Float32Array {
  const view = new DataView(t.bytes.buffer, t.bytes.byteOffset, t.bytes.byteLength);
  const n = t.bytes.byteLength / DTYPE_BYTES[t.dtype];
  const out = new Float32Array(n);
  if (t.dtype === 'F32') for (let i = 0; i < n; i++) out[i] = view.getFloat32(i * 4, true);
  else if (t.dtype === 'F16') for (let i = 0; i < n; i++) out[i] = f16BitsToF32(view.getUint16(i * 2, true));
  else for (let i = 0; i < n; i++) out[i] = bf16BitsToF32(view.getUint16(i * 2, true));
  return out;
}

export function encodeSafetensors(
  tensors: ReadonlyMap<string, TensorToWrite> | Record<string, TensorToWrite>,
  metadata: Record<string, string> = {},
): Uint8Array {
  const entries: [string, TensorToWrite][] =
    tensors instanceof Map
      ? [...tensors.entries()]
      : Object.entries(tensors as Record<string, TensorToWrite>);
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const [name, t] of entries) {
    const numel = t.shape.reduce((a, b) => a * b, 1);
    if (numel !== t.data.length) {
      throw new KVError(
        'SAFETENSORS_INVALID',
        `Tensor '${name}' has ${t.data.length} values but shape ${JSON.stringify(t.shape)}`,
        {
          hint: 'Pass data whose length is the product of the shape.',
        },
      );
    }
    const size = numel * DTYPE_BYTES[t.dtype];
    header[name] = { dtype: t.dtype, shape: [...t.shape], data_offsets: [offset, offset + size] };
    offset += size;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (Buffer.byteLength(json) % 8)) % 8);
  const headerBytes = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + headerBytes.length + offset);
  const view = new DataView(out.buffer);
  view.setBigUint64(0, BigInt(headerBytes.length), true);
  out.set(headerBytes, 8);
  let p = 8 + headerBytes.length;
  for (const [, t] of entries) {
    const d = t.data;
    if (t.dtype === 'F32')
      for (let i = 0; i < d.length; i++, p += 4) view.setFloat32(p, d[i] as number, true);
    else if (t.dtype === 'F16')
      for (let i = 0; i < d.length; i++, p += 2) view.setUint16(p, f32ToF16Bits(d[i] as number), true);
    else for (let i = 0; i < d.length; i++, p += 2) view.setUint16(p, f32ToBf16Bits(d[i] as number), true);
  }
  return out;
}

export function writeSafetensorsFile(
  file: string,
  tensors: ReadonlyMap<string, TensorToWrite> | Record<string, TensorToWrite>,
  metadata: Record<string, string> = {},
): void {
  writeFileSync(file, encodeSafetensors(tensors, metadata));
}
