/**
 * Same-host data path: each side that sends payload over shm owns a staging file in
 * /dev/shm (a ring). The sender writes block bytes straight from its registered view into
 * the file with positional I/O, then sends a small control frame naming the offset; the
 * receiver reads straight into its destination view and acknowledges, which frees the
 * space. The file is unlinked as soon as both sides have it open, so a crash leaks nothing.
 */
import { closeSync, ftruncateSync, openSync, readSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { newNonce } from './auth.ts';

interface Chunk {
  readonly offset: number;
  readonly length: number;
}

export class ShmRingWriter {
  readonly path: string;
  readonly size: number;
  #fd: number;
  #writePos = 0;
  readonly #outstanding: Chunk[] = [];
  #wake: (() => void) | null = null;
  #closed = false;

  constructor(dir: string, size: number) {
    this.path = join(dir, `kvconnect-${process.pid}-${newNonce()}.ring`);
    this.size = size;
    this.#fd = openSync(this.path, 'w+', 0o600);
    ftruncateSync(this.#fd, size);
  }

  /** Copies the views into the ring (waiting for space) and returns the offset used. */
  async put(views: readonly Uint8Array[], length: number): Promise<number> {
    if (length > this.size) throw new Error(`chunk of ${length} bytes exceeds the ${this.size}-byte ring`);
    let offset = this.#place(length);
    while (offset < 0) {
      if (this.#closed) throw new Error('shm ring closed');
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
      offset = this.#place(length);
    }
    let pos = offset;
    for (const v of views) {
      let done = 0;
      while (done < v.length) done += writeSync(this.#fd, v, done, v.length - done, pos + done);
      pos += v.length;
    }
    this.#outstanding.push({ offset, length });
    this.#writePos = offset + length;
    return offset;
  }

  /** The receiver consumed the `n` oldest chunks. */
  release(n: number): void {
    this.#outstanding.splice(0, n);
    const w = this.#wake;
    this.#wake = null;
    w?.();
  }

  #place(length: number): number {
    const candidates = this.#writePos + length <= this.size ? [this.#writePos, 0] : [0];
    for (const at of candidates) {
      if (this.#outstanding.every((c) => at + length <= c.offset || at >= c.offset + c.length)) return at;
    }
    return -1;
  }

  unlink(): void {
    try {
      unlinkSync(this.path);
    } catch {
      // Already unlinked after the handshake.
    }
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.unlink();
    closeSync(this.#fd);
    this.release(0);
  }
}

export class ShmRingReader {
  #fd: number;

  constructor(path: string) {
    this.#fd = openSync(path, 'r');
  }

  /** Fills `dest` from the ring at `offset`; returns the bytes read (short if the file is). */
  read(dest: Uint8Array, offset: number): number {
    let done = 0;
    while (done < dest.length) {
      const n = readSync(this.#fd, dest, done, dest.length - done, offset + done);
      if (n === 0) break;
      done += n;
    }
    return done;
  }

  close(): void {
    closeSync(this.#fd);
  }
}
