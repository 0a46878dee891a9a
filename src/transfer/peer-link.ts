/**
 * One established connection to a peer agent, as both sides see it: ordered sends (a chain,
 * so shm ring order matches frame order), and the data path of the chosen transport —
 * tcp payload rides in the frame, shm payload goes through the staging rings.
 */
import { type FramedConnection, ProtocolError } from './connection.ts';
import type { FrameHeader } from './framing.ts';
import type { ShmRingReader, ShmRingWriter } from './shm-ring.ts';
import type { TransportName } from './types.ts';

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

  /** Sends block bytes; `make` runs just before the bytes leave (checksums are fresh). */
  sendData(make: () => { header: FrameHeader; view: Uint8Array }): Promise<void> {
    return this.enqueue(() => {
      const { header, view } = make();
      if (this.transport === 'tcp') return this.conn.send(header, [view]);
      const ring = this.ringOut!;
      return ring.put([view], view.length).then((offset) => {
        this.conn.send({ ...header, so: offset, sl: view.length });
      });
    });
  }

  /** For shm data frames: fills `dest` from the peer's ring (null dest = skip) and acks. */
  landShm(header: FrameHeader, dest: Uint8Array | null): boolean {
    const offset = header['so'];
    const length = header['sl'];
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || !this.ringIn) {
      throw new ProtocolError('shm data frame without a valid ring location');
    }
    let ok = false;
    if (dest !== null) ok = dest.length === length && this.ringIn.read(dest, offset as number) === length;
    this.#pendingAcks++;
    if (!this.#ackScheduled) {
      this.#ackScheduled = true;
      setImmediate(() => this.#flushAcks());
    }
    return ok;
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
