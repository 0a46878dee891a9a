/**
 * One established connection to a peer agent, as both sides see it: ordered sends (a chain,
 * so shm ring order matches frame order), and the data path of the chosen transport —
 * tcp payload rides in the frame; over shm the receiver copies each chunk either straight
 * from the sender's mapped KV memory (when the sender exposed the region and the receiver
 * mapped it, see kv-map.ts) or from the sender's staging ring.
 */
import type { IncomingRuns } from './block-io.ts';
import { blockChecksums, copyAndChecksum } from './checksum.ts';
import type { FramedConnection } from './connection.ts';
import type { DirectReadSource } from './direct-read.ts';
import type { PeerKvMap } from './kv-map.ts';
import {
  type AgentFrame,
  type DataFrame,
  MAX_DESCRIPTORS,
  type MappedFrame,
  type MappedPart,
  type Mutable,
} from './messages.ts';
import { ProtocolError } from './protocol-error.ts';
import type { ShmRingReader, ShmRingWriter } from './shm-ring.ts';
import type { TransportName } from './types.ts';

/** One data frame to send: `view` is the local memory, `wire` what is sent (the same view unless an outgoing transform altered it). */
export interface DataChunk {
  readonly header: Pick<DataFrame, 'type' | 'xfer' | 'run' | 'block' | 'count' | 'held'>;
  readonly region: number;
  /** Byte offset of `view` in its region. */
  readonly offset: number;
  readonly view: Uint8Array;
  readonly wire: Uint8Array;
  readonly blockBytes: number;
  readonly count: number;
  /** The blocks' checksums recorded when they were granted (lease-table.ts); absent = hash them now. */
  readonly sums?: readonly number[] | undefined;
  /**
   * Throws when the blocks may no longer be read (their grant ended). sendData's `make`
   * checks first; this runs again before bytes are read after a wait for ring space.
   */
  readonly check?: (() => void) | undefined;
}

/** A data frame's header, field by field (an object spread costs microseconds on this path). */
function dataHeader(
  h: DataChunk['header'],
  sums: readonly number[],
  ring?: { readonly offset: number; readonly length: number },
): DataFrame {
  const f: Mutable<DataFrame> = {
    type: 'data',
    xfer: h.xfer,
    run: h.run,
    block: h.block,
    count: h.count,
    sums,
  };
  if (h.held !== undefined) f.held = h.held;
  if (ring !== undefined) f.ring = ring;
  return f;
}

/** A chunk's checksums: those recorded when its blocks were granted, else those of `bytes` now. */
function checksumsOf(chunk: DataChunk, bytes: Uint8Array): readonly number[] {
  return chunk.sums ?? blockChecksums(bytes, chunk.blockBytes, chunk.count);
}

/** Positional-read size for unmapped rings: a few blocks per syscall, still cache-sized. */
const FILE_PIECE_BYTES = 256 << 10;

/**
 * Mapped-KV pieces go out together in one `mapped` frame once this many bytes are announced
 * (or before anything else is sent, and at the end of the transfer's runs): the receiver then
 * decodes and handles one frame per batch instead of one per piece, while copying one batch
 * as the sender hashes the next. Mapped pieces are not acknowledged and have no window: they
 * hold no resource of the sender's (the bytes stay in its KV, under the transfer's grant or
 * until its completion), and the acks that a 16 MiB window needed cost the receiver one
 * socket write per batch and kept the sender waiting for them; without them a WRITE measured
 * faster.
 */
export const MAPPED_BATCH_BYTES = 8 << 20;

/** A `mapped` frame being filled. */
interface MappedBatch {
  readonly xfer: number;
  readonly parts: MappedPart[];
  readonly sums: number[];
  readonly held: number | undefined;
  bytes: number;
}

/** Received shm bytes after which acks go out at once (a large transfer is flowing). */
const ACK_EAGER_BYTES = 1 << 20;
/** Longest a small transfer's ack waits for a frame to ride with. */
const ACK_LAZY_MS = 5;

export class PeerLink {
  readonly conn: FramedConnection<AgentFrame>;
  readonly transport: TransportName;
  ringOut: ShmRingWriter | null = null;
  ringIn: ShmRingReader | null = null;
  /** The peer's KV memory mapped here (read-only), to copy its chunks from. */
  peerKv: PeerKvMap | null = null;
  /** The peer's lease table mapped here (read-only) with its KV: this side serves its own READs (direct-read.ts). */
  direct: DirectReadSource | null = null;
  /** The mapping of the peer's lease table. */
  peerLeaseMap: PeerKvMap | null = null;
  /** Our regions the peer has mapped: chunks of these go by reference, not through the ring. */
  mappedByPeer: ReadonlySet<number> = new Set();
  /** The peer mapped our KV and lease table: it can pull our WRITEs of recorded blocks. */
  peerPulls = false;
  #tail: Promise<void> | null = null;
  /** Ring chunks sent and not acknowledged yet. */
  #unackedRing = 0;
  #pendingAcks = 0;
  #pendingAckBytes = 0;
  #ackImmediate: NodeJS.Immediate | null = null;
  #ackTimer: NodeJS.Timeout | null = null;
  #batch: MappedBatch | null = null;

  constructor(conn: FramedConnection<AgentFrame>, transport: TransportName) {
    this.conn = conn;
    this.transport = transport;
    conn.onClose(() => {
      this.#flushAcksNow();
      this.#dropBatch();
      this.ringOut?.close();
      this.ringIn?.close();
      this.direct = null;
      this.peerLeaseMap?.close();
      this.peerKv?.close();
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

  sendControl(header: Exclude<AgentFrame, DataFrame>): Promise<void> {
    return this.enqueue(() => {
      this.#flushBatch();
      return this.#withAcks(() => this.conn.send(header));
    });
  }

  /** Sends pending acks, then runs `send`: corked together, so both leave in one write. */
  #withAcks<T>(send: () => T): T {
    if (this.#pendingAcks === 0 || this.conn.closed) {
      this.#flushAcksNow();
      return send();
    }
    let out: T | undefined;
    this.corked(() => {
      this.#flushAcksNow();
      out = send();
    });
    return out as T;
  }

  /** Runs `fn`, so that every frame it sends at once leaves in one write (syscall) with the others. */
  corked(fn: () => void): void {
    const s = this.conn.socket;
    s.cork();
    try {
      fn();
    } finally {
      s.uncork();
    }
  }

  /**
   * Sends block bytes; `make` runs just before the bytes leave, so checksums are fresh: over
   * tcp they are computed right before the write, over a mapped ring in the same pass as
   * the copy into the ring, for mapped KV right before the chunk is announced.
   */
  sendData(make: () => DataChunk): Promise<void> {
    return this.enqueue(() => {
      this.#flushAcksNow();
      const chunk = make();
      const { header, view, wire, blockBytes, count } = chunk;
      if (this.transport === 'shm' && this.mappedByPeer.has(chunk.region)) return this.#sendMapped(chunk);
      // Any other frame leaves after the pieces announced before it.
      this.#flushBatch();
      if (this.transport === 'tcp')
        return this.conn.send(dataHeader(header, checksumsOf(chunk, view)), [wire]);
      const ring = this.ringOut!;
      if (ring.mapped && wire === view) {
        return ring.putHashed(view, blockBytes, count, chunk.check).then(({ offset, sums }) => {
          this.#unackedRing++;
          this.conn.send(dataHeader(header, sums, { offset, length: view.length }));
        });
      }
      const sums = checksumsOf(chunk, view);
      return ring.put([wire], wire.length, chunk.check).then((offset) => {
        this.#unackedRing++;
        this.conn.send(dataHeader(header, sums, { offset, length: wire.length }));
      });
    });
  }

  /**
   * The receiver copies these bytes from our memory itself. An outgoing transform's altered bytes
   * stand for what the source held when it was hashed: the receiver then copies bytes that
   * changed after hashing (a torn read), which its check must catch. Synchronous (unless the
   * socket must drain), so the frames of a small WRITE (write, mapped, write_end) leave in one
   * write and wake the receiver once.
   */
  #sendMapped(chunk: DataChunk): Promise<void> | undefined {
    if (this.conn.closed) return undefined;
    chunk.check?.();
    const sums = checksumsOf(chunk, chunk.wire);
    const { header } = chunk;
    let b = this.#batch;
    let drained: Promise<void> | undefined;
    if (b !== null && (b.xfer !== header.xfer || b.sums.length + sums.length > MAX_DESCRIPTORS)) {
      drained = this.#flushBatch();
      b = null;
    }
    if (b === null) {
      b = { xfer: header.xfer, parts: [], sums: [], bytes: 0, held: header.held };
      this.#batch = b;
    }
    b.parts.push([header.run, header.block, header.count, chunk.region, chunk.offset]);
    for (const x of sums) b.sums.push(x);
    b.bytes += chunk.view.length;
    if (b.bytes >= MAPPED_BATCH_BYTES) drained = this.#flushBatch() ?? drained;
    return drained;
  }

  /** Sends the pieces announced so far (one `mapped` frame); a promise when the socket must drain first. */
  #flushBatch(): Promise<void> | undefined {
    const b = this.#dropBatch();
    if (b === null || this.conn.closed) return undefined;
    const f: Mutable<MappedFrame> = { type: 'mapped', xfer: b.xfer, parts: b.parts, sums: b.sums };
    if (b.held !== undefined) f.held = b.held;
    return this.conn.send(f);
  }

  #dropBatch(): MappedBatch | null {
    const b = this.#batch;
    this.#batch = null;
    return b;
  }

  /**
   * Ends a transfer's data: sends the pieces still batched, after every data send queued
   * before. A piece is checked (its grant) and hashed in the same synchronous run that sends
   * its frame: nothing, a revocation included, runs in between.
   */
  endData(): Promise<void> {
    return this.enqueue(() => this.#flushBatch());
  }

  /**
   * For shm data frames: fills the destination that `runs` assigns to the frame (none =
   * skip) from the peer's mapped KV or ring (acking ring chunks), and returns the checksums of what landed
   * when they were computed during the copy. Each block is hashed right after it lands,
   * while it is still in cache.
   */
  landShm(
    frame: DataFrame,
    runs: IncomingRuns | null,
  ): { view: Uint8Array | null; ok: boolean; sums?: number[] } {
    if (this.transport !== 'shm') throw new ProtocolError('shm data frame on a tcp connection');
    const view = runs ? runs.destination(frame) : null;
    const length = frame.src ? frame.count * (runs?.pieceBytes ?? 0) : (frame.ring?.length ?? -1);
    let ok = false;
    let sums: number[] | undefined;
    if (frame.src) {
      if (!this.peerKv) throw new ProtocolError('data frame names mapped memory that was never offered');
      const src = view ? this.peerKv.view(frame.src.region, frame.src.offset, length) : null;
      if (runs && view && src && src.length === view.length) {
        sums = copyAndChecksum(view, src, runs.pieceBytes, frame.count);
        ok = true;
      }
    } else if (frame.ring) {
      const ring = this.ringIn;
      if (!ring) throw new ProtocolError('shm data frame without a ring');
      if (runs && view && view.length === length) {
        const bb = runs.pieceBytes;
        const piece = ring.mapped ? bb : bb * Math.max(1, Math.floor(FILE_PIECE_BYTES / bb));
        ok = ring.read(view, frame.ring.offset, piece, (filled) => runs.progress(filled)) === length;
      }
    } else {
      throw new ProtocolError('shm data frame names neither a ring nor mapped memory');
    }
    if (frame.ring) this.#scheduleAck(frame.ring.length);
    return sums === undefined ? { view, ok } : { view, ok, sums };
  }

  /**
   * Acks are batched: after a socket read's frames when a large transfer is flowing (the
   * sender's ring waits for them), otherwise with the next frame this side sends,
   * or within ACK_LAZY_MS, so a small transfer costs the sender no extra wake-up.
   */
  #scheduleAck(bytes: number): void {
    this.#pendingAcks++;
    this.#pendingAckBytes += bytes;
    // A small ring fills before ACK_EAGER_BYTES arrive: ack once a quarter of it is held.
    const eager = this.ringIn ? Math.min(ACK_EAGER_BYTES, this.ringIn.size / 4) : ACK_EAGER_BYTES;
    if (this.#pendingAckBytes >= eager) {
      if (this.#ackImmediate === null) this.#ackImmediate = setImmediate(() => this.#flushAcksNow());
    } else if (this.#ackTimer === null) {
      this.#ackTimer = setTimeout(() => this.#flushAcksNow(), ACK_LAZY_MS);
      this.#ackTimer.unref();
    }
  }

  #flushAcksNow(): void {
    if (this.#ackImmediate !== null) clearImmediate(this.#ackImmediate);
    if (this.#ackTimer !== null) clearTimeout(this.#ackTimer);
    this.#ackImmediate = null;
    this.#ackTimer = null;
    const count = this.#pendingAcks;
    this.#pendingAcks = 0;
    this.#pendingAckBytes = 0;
    if (count > 0 && !this.conn.closed) this.conn.send({ type: 'ack', count });
  }

  /** The peer consumed our `count` oldest ring chunks: free their ring space. */
  onAck(count: number): void {
    if (count > this.#unackedRing) throw new ProtocolError('ack for frames never sent');
    this.#unackedRing -= count;
    this.ringOut?.release(count);
  }
}
