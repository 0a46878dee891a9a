/**
 * One established connection to a peer agent, as both sides see it: ordered sends (a chain,
 * so shm ring order matches frame order), and the data path of the chosen transport —
 * tcp payload rides in the frame, shm payload goes through the staging rings.
 */

import type { IncomingRuns } from './block-io.ts';
import { blockChecksums } from './checksum.ts';
import { type FramedConnection, ProtocolError } from './connection.ts';
import type { FrameHeader } from './framing.ts';
import type { ShmRingReader, ShmRingWriter } from './shm-ring.ts';
import type { TransportName } from './types.ts';

/** One data frame to send: `view` is hashed, `wire` is what is sent (the same view unless a test hook altered it). */
export interface DataChunk {
  readonly header: FrameHeader;
  readonly view: Uint8Array;
  readonly wire: Uint8Array;
  readonly blockBytes: number;
  readonly count: number;
}

/** Positional-read size for unmapped rings: a few blocks per syscall, still cache-sized. */
const FILE_PIECE_BYTES = 256 << 10;

export class PeerLink {
  readonly conn: FramedConnection;
  readonly transport: TransportName;
  ringOut: ShmRingWriter | null = null;
  ringIn: ShmRingReader | null = null;
  #tail: Promise<void> | null = null;
  #pendingAcks = 0;
  #ackScheduled = false;

  constructor(conn: FramedConnection, transport: TransportName) {
    this.conn = conn;
    this.transport = transport;
    conn.onClose(() => {
      this.ringOut?.close();
      this.ringIn?.close();
    });
  }

  /** Holds every later send until `gate` settles (used while the handshake runs). */
  gate(gate: Promise<void>): void {
    this.#tail = gate;
  }

  /** Runs `fn` after every earlier send; runs it at once when nothing is queued. */
  enqueue(fn: () => Promise<void> | undefined): Promise<void> {
    if (this.#tail === null) {
      let r: Promise<void> | undefined;
      try {
        r = fn();
      } catch (e) {
        return Promise.reject(e);
      }
      if (r === undefined) return Promise.resolve();
      this.#track(r);
      return r;
    }
    const next = this.#tail.then(fn);
    this.#track(next);
    return next;
  }

  #track(p: Promise<void>): void {
    const settled = p.then(
      () => undefined,
      () => undefined,
    );
    this.#tail = settled;
    void settled.then(() => {
      if (this.#tail === settled) this.#tail = null;
    });
  }

  sendControl(header: FrameHeader): Promise<void> {
    return this.enqueue(() => this.conn.send(header));
  }

  /**
   * Sends block bytes; `make` runs just before the bytes leave, so checksums are fresh:
   * over tcp they are computed right before the write, over a mapped shm ring in the same
   * pass as the copy into the ring. `wire` differs from `view` only under a test hook.
   */
  sendData(make: () => DataChunk): Promise<void> {
    return this.enqueue(() => {
      const { header, view, wire, blockBytes, count } = make();
      if (this.transport === 'tcp') {
        return this.conn.send({ ...header, c: blockChecksums(view, blockBytes, count) }, [wire]);
      }
      const ring = this.ringOut!;
      if (ring.mapped && wire === view) {
        return ring.putHashed(view, blockBytes, count).then(({ offset, sums }) => {
          this.conn.send({ ...header, c: sums, so: offset, sl: view.length });
        });
      }
      const c = blockChecksums(view, blockBytes, count);
      return ring.put([wire], wire.length).then((offset) => {
        this.conn.send({ ...header, c, so: offset, sl: wire.length });
      });
    });
  }

  /**
   * For shm data frames: fills the destination that `runs` assigns to the frame (none =
   * skip) from the peer's ring, and acks. Each block is hashed right after it lands
   * in local memory, while it is still in cache (a mapped ring is copied one block at a
   * time, a file ring read a few blocks per syscall).
   */
  landShm(header: FrameHeader, runs: IncomingRuns | null): { view: Uint8Array | null; ok: boolean } {
    const offset = header['so'];
    const length = header['sl'];
    const ring = this.ringIn;
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || !ring) {
      throw new ProtocolError('shm data frame without a valid ring location');
    }
    const view = runs ? runs.destination(header) : null;
    let ok = false;
    if (runs && view && view.length === length) {
      const bb = runs.pieceBytes;
      const piece = ring.mapped ? bb : bb * Math.max(1, Math.floor(FILE_PIECE_BYTES / bb));
      ok = ring.read(view, offset as number, piece, (filled) => runs.progress(filled)) === length;
    }
    this.#pendingAcks++;
    if (!this.#ackScheduled) {
      this.#ackScheduled = true;
      setImmediate(() => this.#flushAcks());
    }
    return { view, ok };
  }

  #flushAcks(): void {
    this.#ackScheduled = false;
    const n = this.#pendingAcks;
    this.#pendingAcks = 0;
    if (n > 0 && !this.conn.closed) this.conn.send({ t: 'ack', n });
  }

  onAck(header: FrameHeader): void {
    const n = header['n'];
    if (!Number.isSafeInteger(n) || (n as number) < 1) throw new ProtocolError('bad ack');
    this.ringOut?.release(n as number);
  }
}

/** Reads a non-negative integer field of a peer's header or throws ProtocolError. */
export function intField(h: FrameHeader, key: string): number {
  const v = h[key];
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
    throw new ProtocolError(`field '${key}' of '${h.t}' must be a non-negative integer`);
  }
  return v;
}

export function stringField(h: FrameHeader, key: string): string {
  const v = h[key];
  if (typeof v !== 'string' || v.length > 4096)
    throw new ProtocolError(`field '${key}' of '${h.t}' must be a string`);
  return v;
}

export function optionalString(h: FrameHeader, key: string): string | undefined {
  return h[key] === undefined ? undefined : stringField(h, key);
}
