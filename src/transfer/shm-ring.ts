/**
 * Same-host data path: each side that sends payload over shm owns a staging file in
 * /dev/shm (a ring). The sender copies block bytes from its registered view into the ring,
 * then sends a small control frame naming the offset; the receiver copies them into its
 * destination view and acknowledges, which frees the space. The file is unlinked as soon
 * as both sides have it open, so a crash leaks nothing.
 *
 * With the native addon (native-shm.ts) the ring is mapped memory shared by both
 * processes: one memcpy per side, and the sender hashes each block in the same pass as
 * its copy. Without it, the ring is accessed with positional file I/O. Either side may use
 * either mode: the file and the control frames are the same.
 */
import { closeSync, fstatSync, ftruncateSync, openSync, readSync, unlinkSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { newNonce } from './auth.ts';
import { blockChecksum } from './checksum.ts';
import { copyBytes } from './copy-bytes.ts';
import { nativeShm } from './native-shm.ts';
import { ProtocolError } from './protocol-error.ts';

interface Chunk {
  readonly offset: number;
  readonly length: number;
}

/** Largest peer ring this side agrees to map. */
const MAX_RING_BYTES = 2 ** 32;

export class ShmRingWriter {
  readonly path: string;
  readonly size: number;
  #fd = -1;
  #mapped: ArrayBuffer | null = null;
  #mem: Uint8Array | null = null;
  #writePos = 0;
  readonly #outstanding: Chunk[] = [];
  #wake: (() => void) | null = null;
  #closed = false;

  constructor(dir: string, size: number) {
    this.path = join(dir, `kvconnect-${process.pid}-${newNonce()}.ring`);
    this.size = size;
    if (nativeShm) {
      try {
        this.#mapped = nativeShm.map(this.path, size, true);
        this.#mem = new Uint8Array(this.#mapped);
        return;
      } catch {
        // e.g. /dev/shm too small to reserve the ring: the sparse file below may still do.
      }
    }
    this.#fd = openSync(this.path, 'w+', 0o600);
    ftruncateSync(this.#fd, size);
  }

  /** True when the ring is mapped memory (native addon). */
  get mapped(): boolean {
    return this.#mem !== null;
  }

  /**
   * Copies the views into the ring (waiting for space) and returns the offset used.
   * `beforeCopy` runs once space is found, right before the copy; it may throw to cancel.
   */
  async put(views: readonly Uint8Array[], length: number, beforeCopy?: () => void): Promise<number> {
    const offset = await this.#reserve(length);
    beforeCopy?.();
    let pos = offset;
    for (const v of views) {
      this.#copyIn(v, pos);
      pos += v.length;
    }
    this.#commit(offset, length);
    return offset;
  }

  /**
   * Copies `count` blocks of `view` into the ring and returns their checksums, each block
   * hashed right after its copy, from the ring while it is still in cache (measured faster
   * than hashing the source first or hashing in the copy loop). Mapped rings only.
   */
  async putHashed(
    view: Uint8Array,
    blockBytes: number,
    count: number,
    beforeCopy?: () => void,
  ): Promise<{ offset: number; sums: number[] }> {
    const offset = await this.#reserve(view.length);
    beforeCopy?.();
    const mem = this.#mem;
    if (mem === null) throw new Error('putHashed needs a mapped ring');
    const sums = new Array<number>(count);
    for (let i = 0; i < count; i++) {
      const at = i * blockBytes;
      const block = mem.subarray(offset + at, offset + at + blockBytes);
      copyBytes(block, view.subarray(at, at + blockBytes));
      sums[i] = blockChecksum(block);
    }
    this.#commit(offset, view.length);
    return { offset, sums };
  }

  async #reserve(length: number): Promise<number> {
    if (length > this.size) throw new Error(`chunk of ${length} bytes exceeds the ${this.size}-byte ring`);
    let offset = this.#place(length);
    while (offset < 0) {
      if (this.#closed) throw new Error('shm ring closed');
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
      offset = this.#place(length);
    }
    if (this.#closed) throw new Error('shm ring closed');
    return offset;
  }

  #copyIn(v: Uint8Array, pos: number): void {
    if (this.#mem !== null) {
      copyBytes(this.#mem, v, pos);
      return;
    }
    let done = 0;
    while (done < v.length) done += writeSync(this.#fd, v, done, v.length - done, pos + done);
  }

  #commit(offset: number, length: number): void {
    this.#outstanding.push({ offset, length });
    this.#writePos = offset + length;
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
    if (this.#mapped !== null) nativeShm?.release(this.#mapped);
    else closeSync(this.#fd);
    this.#mapped = null;
    this.#mem = null;
    this.release(0);
  }
}

/** Throws ProtocolError unless a peer's ring path names a staging ring file in `shmDir`. */
export function checkRingPath(path: string | undefined, shmDir: string): string {
  if (path === undefined || dirname(path) !== shmDir || !/^kvconnect-[\w-]+\.ring$/.test(basename(path))) {
    throw new ProtocolError('shm ring path outside the staging directory');
  }
  return path;
}

export class ShmRingReader {
  /** Size of the peer's ring. */
  readonly size: number;
  #fd = -1;
  #mapped: ArrayBuffer | null = null;
  #mem: Uint8Array | null = null;

  constructor(path: string) {
    const fd = openSync(path, 'r');
    try {
      this.size = fstatSync(fd).size;
    } catch (e) {
      closeSync(fd);
      throw e;
    }
    if (nativeShm && this.size > 0 && this.size <= MAX_RING_BYTES) {
      try {
        this.#mapped = nativeShm.map(path, this.size, false);
        this.#mem = new Uint8Array(this.#mapped);
        closeSync(fd);
        return;
      } catch {
        // Fall back to positional reads of the same file.
      }
    }
    this.#fd = fd;
  }

  /** True when the peer's ring is mapped memory (native addon). */
  get mapped(): boolean {
    return this.#mem !== null;
  }

  /**
   * Fills `dest` from the ring at `offset` in pieces of `pieceBytes`, calling `progress`
   * with the bytes filled so far after each piece; returns the bytes read (short if the
   * location lies outside the ring or the file is short).
   */
  read(dest: Uint8Array, offset: number, pieceBytes: number, progress?: (filled: number) => void): number {
    const mem = this.#mem;
    if (mem !== null && offset + dest.length > mem.length) return 0;

    const step = Math.max(1, pieceBytes);
    let done = 0;
    while (done < dest.length) {
      const n = Math.min(step, dest.length - done);
      if (mem !== null) {
        copyBytes(dest, mem.subarray(offset + done, offset + done + n), done);
      } else {
        let got = 0;
        while (got < n) {
          const r = readSync(this.#fd, dest, done + got, n - got, offset + done + got);
          if (r === 0) return done + got;
          got += r;
        }
      }
      done += n;
      progress?.(done);
    }
    return done;
  }

  close(): void {
    if (this.#mapped !== null) nativeShm?.release(this.#mapped);
    else if (this.#fd >= 0) closeSync(this.#fd);
    this.#mapped = null;
    this.#mem = null;
    this.#fd = -1;
  }
}
