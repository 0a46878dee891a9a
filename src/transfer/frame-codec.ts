/**
 * Wire framing: a 16-byte binary prefix, a small JSON header, then raw payload bytes.
 *
 *   u32 magic 'KVXF' | u16 version | u16 reserved | u32 headerLen | u32 payloadLen
 *
 * Hand-written rather than msgpack/CBOR: msgpackr copies the payload into the message, so
 * its encoding time grows with the payload (milliseconds for 16 MiB), while this framing
 * costs the same few microseconds whatever the payload size, because the payload is handed
 * to the socket as a view and never concatenated. JSON decodes a header of this size as
 * fast as msgpackr and stays readable with xxd.
 *
 * Lengths are checked against hard limits before anything is allocated; a violation
 * throws FramingError and the caller closes that connection.
 */
import { copyBytes } from './copy-bytes.ts';

export const FRAME_MAGIC = 0x4b565846; // 'KVXF'
export const FRAME_VERSION = 1;
export const PREFIX_BYTES = 16;
export const MAX_HEADER_BYTES = 1 << 20;
export const MAX_PAYLOAD_BYTES = 64 << 20;

export class FramingError extends Error {
  override readonly name = 'FramingError';
}

/** What every header has on the wire: its message type (messages.ts lists them). */
export interface Header {
  readonly type: string;
}

/** Turns a decoded JSON object into a checked message, or throws (the connection is then closed). */
export type HeaderParser<H extends Header> = (raw: Readonly<Record<string, unknown>>) => H;

export function encodePrefixAndHeader(header: Header, payloadLength: number): Buffer {
  if (payloadLength < 0 || payloadLength > MAX_PAYLOAD_BYTES) {
    throw new FramingError(`payload of ${payloadLength} bytes exceeds ${MAX_PAYLOAD_BYTES}`);
  }
  const json = Buffer.from(JSON.stringify(header), 'utf8');
  if (json.length > MAX_HEADER_BYTES) throw new FramingError(`header of ${json.length} bytes too large`);
  const out = Buffer.allocUnsafe(PREFIX_BYTES + json.length);
  out.writeUInt32BE(FRAME_MAGIC, 0);
  out.writeUInt16BE(FRAME_VERSION, 4);
  out.writeUInt16BE(0, 6);
  out.writeUInt32BE(json.length, 8);
  out.writeUInt32BE(payloadLength, 12);
  json.copy(out, PREFIX_BYTES);
  return out;
}

export interface FrameSink<H extends Header> {
  /**
   * Called once the header is parsed and before any payload byte arrives: return the view
   * the payload must land in (exactly payloadLength bytes), or null to discard it.
   */
  destination(header: H, payloadLength: number): Uint8Array | null;
  /** Called when the whole frame has arrived; `payload` is the view from destination(). */
  frame(header: H, payload: Uint8Array | null): void;
  /** Optional: `filled` payload bytes of the current frame have landed (lets checksums run while data is hot). */
  progress?(header: H, filled: number): void;
}

type Phase = 'prefix' | 'header' | 'payload';

/** Incremental decoder: feed socket chunks; payload bytes are copied once, into the sink's view. */
export class FrameDecoder<H extends Header> {
  readonly #sink: FrameSink<H>;
  readonly #parse: HeaderParser<H>;
  #phase: Phase = 'prefix';
  readonly #prefix = Buffer.alloc(PREFIX_BYTES);
  #header: Buffer = Buffer.alloc(0);
  #parsed: H | null = null;
  #filled = 0;
  #payloadLength = 0;
  #dest: Uint8Array | null = null;

  constructor(sink: FrameSink<H>, parse: HeaderParser<H>) {
    this.#sink = sink;
    this.#parse = parse;
  }

  push(chunk: Uint8Array): void {
    let pos = 0;
    while (pos < chunk.length) {
      if (this.#phase === 'prefix') {
        const n = Math.min(PREFIX_BYTES - this.#filled, chunk.length - pos);
        this.#prefix.set(chunk.subarray(pos, pos + n), this.#filled);
        this.#filled += n;
        pos += n;
        if (this.#filled === PREFIX_BYTES) this.#onPrefix();
      } else if (this.#phase === 'header') {
        const n = Math.min(this.#header.length - this.#filled, chunk.length - pos);
        this.#header.set(chunk.subarray(pos, pos + n), this.#filled);
        this.#filled += n;
        pos += n;
        if (this.#filled === this.#header.length) this.#onHeader();
      } else {
        const n = Math.min(this.#payloadLength - this.#filled, chunk.length - pos);
        if (this.#dest !== null) copyBytes(this.#dest, chunk.subarray(pos, pos + n), this.#filled);
        this.#filled += n;
        pos += n;
        this.#progress();
        if (this.#filled === this.#payloadLength) this.#finish();
      }
    }
  }

  /** Where the next socket read may go directly: the rest of the current payload's view. */
  directTarget(): Uint8Array | null {
    if (this.#phase !== 'payload' || this.#dest === null) return null;
    return this.#dest.subarray(this.#filled, this.#payloadLength);
  }

  /** `n` payload bytes were read straight into directTarget(). */
  directFilled(n: number): void {
    this.#filled += n;
    this.#progress();
    if (this.#filled === this.#payloadLength) this.#finish();
  }

  #progress(): void {
    if (this.#dest !== null && this.#sink.progress) this.#sink.progress(this.#parsed!, this.#filled);
  }

  #onPrefix(): void {
    const p = this.#prefix;
    const magic = p.readUInt32BE(0);
    if (magic !== FRAME_MAGIC) throw new FramingError(`bad magic 0x${magic.toString(16)}`);
    const version = p.readUInt16BE(4);
    if (version !== FRAME_VERSION) throw new FramingError(`unsupported frame version ${version}`);
    const headerLength = p.readUInt32BE(8);
    this.#payloadLength = p.readUInt32BE(12);
    if (headerLength < 2 || headerLength > MAX_HEADER_BYTES) {
      throw new FramingError(`header length ${headerLength} out of bounds`);
    }
    if (this.#payloadLength > MAX_PAYLOAD_BYTES) {
      throw new FramingError(`payload length ${this.#payloadLength} exceeds ${MAX_PAYLOAD_BYTES}`);
    }
    this.#header = Buffer.allocUnsafe(headerLength);
    this.#phase = 'header';
    this.#filled = 0;
  }

  #onHeader(): void {
    let parsed: unknown;
    try {
      parsed = JSON.parse(this.#header.toString('utf8'));
    } catch {
      throw new FramingError('header is not valid JSON');
    }
    if (
      typeof parsed !== 'object' ||
      parsed === null ||
      Array.isArray(parsed) ||
      typeof (parsed as { type?: unknown }).type !== 'string'
    ) {
      throw new FramingError('header has no message type');
    }
    this.#parsed = this.#parse(parsed as Record<string, unknown>);
    this.#dest = this.#sink.destination(this.#parsed, this.#payloadLength);
    if (this.#dest !== null && this.#dest.length !== this.#payloadLength) {
      throw new FramingError('payload destination has the wrong size');
    }
    this.#phase = 'payload';
    this.#filled = 0;
    if (this.#payloadLength === 0) this.#finish();
  }

  #finish(): void {
    const header = this.#parsed!;
    const dest = this.#dest;
    this.#phase = 'prefix';
    this.#filled = 0;
    this.#parsed = null;
    this.#dest = null;
    this.#sink.frame(header, dest);
  }
}
