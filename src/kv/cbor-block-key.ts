/**
 * Canonical CBOR (RFC 8949 §4.2.1, what Python's cbor2.dumps(canonical=True) emits) of the
 * one value prefix hashing encodes: [parent hash bytes, [token ids], extra keys | null].
 *
 * Hand-written into one reused buffer instead of calling cbor2: cbor2's generic encoder
 * costs far more per block than the SHA-256 of the result, so it would set the speed of
 * prefix hashing (docs/BENCHMARKS.md, "KV core"). test/kv/block-hash.test.ts checks this
 * writer byte for byte against cbor2 (fast-check).
 */
import { KVError } from '../errors/index.ts';

/** Values allowed in extra keys: LoRA names, cache salt, (mm identifier, offset) pairs. */
export type ExtraKey = string | number | Uint8Array | readonly ExtraKey[];

const utf8 = new TextEncoder();

export class CborBlockKeyWriter {
  #buf = new Uint8Array(512);
  #view = new DataView(this.#buf.buffer);
  #pos = 0;

  /** Encodes the block key and returns a view of the reused buffer (valid until the next call). */
  encode(
    parent: Uint8Array,
    tokens: ArrayLike<number>,
    start: number,
    end: number,
    extraKeys: readonly ExtraKey[] | null,
  ): Uint8Array {
    this.#pos = 0;
    this.#reserve(16 + parent.length + 9 * (end - start));
    this.#byte(0x83);
    this.#head(2, parent.length);
    this.#buf.set(parent, this.#pos);
    this.#pos += parent.length;
    this.#head(4, end - start);
    this.#tokens(tokens, start, end);
    if (extraKeys === null) this.#byte(0xf6);
    else this.#value(extraKeys);
    return this.#buf.subarray(0, this.#pos);
  }

  /**
   * Token ids, the bulk of every key, written inline when they are small non-negative
   * integers (every real vocabulary) instead of through #int per token: a trace simulation
   * hashes every token of every prompt, and a call per token showed up in its profile.
   * Other values take the general path.
   */
  #tokens(tokens: ArrayLike<number>, start: number, end: number): void {
    const buf = this.#buf;
    let pos = this.#pos;
    for (let i = start; i < end; i++) {
      const n = tokens[i]!;
      if ((n | 0) === n && n >= 0) {
        if (n < 24) buf[pos++] = n;
        else if (n < 0x100) {
          buf[pos++] = 24;
          buf[pos++] = n;
        } else if (n < 0x10000) {
          buf[pos++] = 25;
          buf[pos++] = n >>> 8;
          buf[pos++] = n & 0xff;
        } else {
          buf[pos++] = 26;
          buf[pos++] = n >>> 24;
          buf[pos++] = (n >>> 16) & 0xff;
          buf[pos++] = (n >>> 8) & 0xff;
          buf[pos++] = n & 0xff;
        }
      } else {
        this.#pos = pos;
        this.#int(n);
        pos = this.#pos;
      }
    }
    this.#pos = pos;
  }

  /** Canonical CBOR of a text string (the NONE_HASH seed). */
  encodeText(text: string): Uint8Array {
    this.#pos = 0;
    this.#value(text);
    return this.#buf.subarray(0, this.#pos);
  }

  #value(v: ExtraKey): void {
    if (typeof v === 'number') {
      this.#reserve(9);
      this.#int(v);
    } else if (typeof v === 'string') {
      const bytes = utf8.encode(v);
      this.#reserve(9 + bytes.length);
      this.#head(3, bytes.length);
      this.#buf.set(bytes, this.#pos);
      this.#pos += bytes.length;
    } else if (v instanceof Uint8Array) {
      this.#reserve(9 + v.length);
      this.#head(2, v.length);
      this.#buf.set(v, this.#pos);
      this.#pos += v.length;
    } else {
      this.#reserve(9);
      this.#head(4, v.length);
      for (const item of v) this.#value(item);
    }
  }

  #int(n: number): void {
    if (!Number.isSafeInteger(n)) {
      throw new KVError('KV_HASH_INPUT', `block hash inputs must be safe integers, got ${n}`, {
        hint: 'Token ids and extra-key numbers must be integers.',
      });
    }
    if (n >= 0) this.#head(0, n);
    else this.#head(1, -1 - n);
  }

  #head(major: number, n: number): void {
    const mt = major << 5;
    const buf = this.#buf;
    if (n < 24) buf[this.#pos++] = mt | n;
    else if (n < 0x100) {
      buf[this.#pos++] = mt | 24;
      buf[this.#pos++] = n;
    } else if (n < 0x10000) {
      buf[this.#pos++] = mt | 25;
      buf[this.#pos++] = n >>> 8;
      buf[this.#pos++] = n & 0xff;
    } else if (n < 0x100000000) {
      buf[this.#pos++] = mt | 26;
      this.#view.setUint32(this.#pos, n);
      this.#pos += 4;
    } else {
      buf[this.#pos++] = mt | 27;
      this.#view.setUint32(this.#pos, Math.floor(n / 0x100000000));
      this.#view.setUint32(this.#pos + 4, n >>> 0);
      this.#pos += 8;
    }
  }

  #byte(b: number): void {
    this.#buf[this.#pos++] = b;
  }

  #reserve(extra: number): void {
    if (this.#pos + extra <= this.#buf.length) return;
    const next = new Uint8Array(Math.max(this.#buf.length * 2, this.#pos + extra));
    next.set(this.#buf.subarray(0, this.#pos));
    this.#buf = next;
    this.#view = new DataView(next.buffer);
  }
}
