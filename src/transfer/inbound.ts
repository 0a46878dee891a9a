/**
 * The serving side of a connection: authenticates the peer, then serves READs of granted
 * blocks from local memory and accepts WRITEs into granted blocks, and queues notifications.
 * A READ whose named grant does not exist yet is parked until the grant appears (bounded).
 */
import type { Socket } from 'node:net';
import { basename, dirname } from 'node:path';
import { getLogger } from '../logging/logger.ts';
import type { AgentCore } from './agent-core.ts';
import { MAX_DESCRIPTORS } from './agent-core.ts';
import { authProof, newNonce, verifyProof } from './auth.ts';
import { type BlockRun, IncomingRuns, PermissionEndedError, sendRuns } from './block-io.ts';
import { FramedConnection, ProtocolError } from './connection.ts';
import { checkRun } from './descriptors.ts';
import type { FrameHeader } from './framing.ts';
import type { GrantKind } from './grants.ts';
import { intField, optionalString, PeerLink, stringField } from './peer-link.ts';
import { ShmRingReader, ShmRingWriter } from './shm-ring.ts';
import type { RegionGeometry } from './types.ts';

const log = getLogger('transfer');

interface IncomingWrite {
  readonly runs: IncomingRuns;
  readonly blocks: readonly BlockRun[];
  readonly notification: string | undefined;
  /** Why the receiver stopped accepting it (its write grant ended), if it did. */
  ended: string | null;
}

export class InboundSession {
  readonly #core: AgentCore;
  readonly #conn: FramedConnection;
  readonly #nonce = newNonce();
  #link: PeerLink | null = null;
  #peer: { agentName: string; engineId: string } | null = null;
  readonly #writes = new Map<number, IncomingWrite | null>();
  /** READs waiting for their grant to appear, by transfer id: the cancel of each. */
  readonly #parked = new Map<number, () => void>();
  /** The blocks a WRITE data frame is landing in right now (its payload is split across reads). */
  #landing: BlockRun | null = null;

  constructor(core: AgentCore, socket: Socket) {
    this.#core = core;
    const label = `${socket.remoteAddress}:${socket.remotePort}→${core.agentName}`;
    this.#conn = new FramedConnection(socket, this.#sink(), label);
    const timer = setTimeout(() => {
      if (this.#peer) return;
      log.warn('closing connection %s: no handshake within %d ms', label, core.handshakeTimeoutMs);
      this.#conn.close('handshake timeout');
    }, core.handshakeTimeoutMs);
    timer.unref();
    // A revoked write grant frees its blocks for reuse at once: bytes of a frame already
    // landing there must stop, and only closing the connection stops them mid-frame.
    const offRevoke = core.grants.onRevoke((kind) => {
      const landing = this.#landing;
      if (kind !== 'write' || !landing || !this.#peer) return;
      if (core.grants.check('write', this.#peer, [landing], undefined) === null) return;
      log.warn('closing connection %s: a write grant was revoked while its data was landing', label);
      this.#conn.close('write grant revoked while its data was landing');
    });
    this.#conn.onClose(() => {
      clearTimeout(timer);
      offRevoke();
      for (const cancel of this.#parked.values()) cancel();
      this.#parked.clear();
    });
    this.#conn.send({ t: 'challenge', nonce: this.#nonce, auth: core.secret !== undefined });
  }

  get connection(): FramedConnection {
    return this.#conn;
  }

  #sink() {
    return {
      destination: (h: FrameHeader, length: number): Uint8Array | null => {
        if (h.t !== 'data' || h['so'] !== undefined) {
          if (length > 0) throw new ProtocolError(`unexpected payload on '${h.t}'`);
          return null;
        }
        const w = this.#liveWrite(h);
        if (!w) return null;
        const view = w.runs.destination(h);
        if (view.length !== length) throw new ProtocolError('data payload length does not match its blocks');
        this.#landing = frameRun(w, h);
        return view;
      },
      progress: (h: FrameHeader, filled: number): void => {
        this.#writes.get(h['x'] as number)?.runs.progress(filled);
      },
      frame: (h: FrameHeader, payload: Uint8Array | null): void => {
        this.#landing = null;
        this.#onFrame(h, payload);
      },
    };
  }

  /** The WRITE a data frame belongs to, if its blocks are still granted (else it is ended). */
  #liveWrite(h: FrameHeader): IncomingWrite | null {
    const w = this.#writes.get(intField(h, 'x'));
    if (!w || w.ended !== null) return null;
    const reason = this.#core.grants.check('write', this.#peer!, [frameRun(w, h)], undefined);
    if (reason === null) return w;
    w.ended = reason;
    log.warn('WRITE %d from %s: dropping the rest, %s', h['x'], this.#peer!.agentName, reason);
    return null;
  }

  #onFrame(h: FrameHeader, payload: Uint8Array | null): void {
    if (!this.#peer) {
      if (h.t !== 'hello') throw new ProtocolError(`'${h.t}' before the handshake`);
      this.#onHello(h);
      return;
    }
    const link = this.#link!;
    switch (h.t) {
      case 'ready':
        link.ringOut?.unlink();
        return;
      case 'read':
        this.#onRead(link, h);
        return;
      case 'write':
        this.#onWrite(link, h);
        return;
      case 'data':
        this.#onData(link, h, payload);
        return;
      case 'write_end':
        this.#onWriteEnd(link, h);
        return;
      case 'notif':
        this.#core.deliver({ agent: this.#peer.agentName, message: stringField(h, 'm') });
        return;
      case 'ack':
        link.onAck(h);
        return;
      default:
        throw new ProtocolError(`unknown message '${h.t}'`);
    }
  }

  #onHello(h: FrameHeader): void {
    const agentName = stringField(h, 'agent');
    const engineId = stringField(h, 'engine');
    const clientNonce = stringField(h, 'nonce');
    const transport = h['transport'] === 'shm' ? 'shm' : 'tcp';
    const secret = this.#core.secret;
    if (secret !== undefined && !verifyProof(secret, 'client', this.#nonce, clientNonce, h['proof'])) {
      log.warn('refusing agent %s: authentication failed', agentName);
      this.#conn.send({ t: 'error', reason: 'authentication failed (shared secret mismatch)' });
      this.#conn.socket.end();
      return;
    }
    const link = new PeerLink(this.#conn, transport);
    if (transport === 'shm') {
      const ring = stringField(h, 'ring');
      if (dirname(ring) !== this.#core.shmDir || !/^kvconnect-[\w-]+\.ring$/.test(basename(ring))) {
        throw new ProtocolError('shm ring path outside the staging directory');
      }
      link.ringIn = new ShmRingReader(ring);
      link.ringOut = new ShmRingWriter(this.#core.shmDir, this.#core.ringBytes);
    }
    this.#link = link;
    this.#peer = { agentName, engineId };
    this.#conn.send({
      t: 'welcome',
      agent: this.#core.agentName,
      ...(secret === undefined ? {} : { proof: authProof(secret, 'server', this.#nonce, clientNonce) }),
      ...(link.ringOut ? { ring: link.ringOut.path } : {}),
    });
  }

  /** Parses [[region, first, count], ...] and bounds-checks it against local regions. */
  #runs(h: FrameHeader): BlockRun[] {
    const raw = h['descs'];
    if (!Array.isArray(raw) || raw.length === 0 || raw.length > MAX_DESCRIPTORS) {
      throw new ProtocolError('descs must be a non-empty array');
    }
    const geometry = this.#core.regions as ReadonlyMap<number, RegionGeometry>;
    return raw.map((d: unknown) => {
      if (!Array.isArray(d) || d.length !== 3) throw new ProtocolError('bad descriptor');
      const [region, first, count] = d as [number, number, number];
      checkRun(geometry, region, first, count, 'local');
      return { region, first, count };
    });
  }

  #refusal(kind: GrantKind, h: FrameHeader): { runs: BlockRun[]; reason: string | null } {
    let runs: BlockRun[];
    try {
      runs = this.#runs(h);
    } catch (e) {
      if (e instanceof ProtocolError) throw e;
      return { runs: [], reason: e instanceof Error ? e.message : String(e) };
    }
    const reason = this.#core.grants.check(kind, this.#peer!, runs, optionalString(h, 'grant'));
    return { runs, reason };
  }

  #onRead(link: PeerLink, h: FrameHeader): void {
    const x = intField(h, 'x');
    if (this.#parked.has(x)) throw new ProtocolError(`duplicate transfer id ${x}`);
    const { runs, reason } = this.#refusal('read', h);
    const key = optionalString(h, 'grant');
    if (reason === null) {
      this.#serveRead(link, x, runs, key);
      return;
    }
    const grants = this.#core.grants;
    if (key !== undefined && runs.length > 0 && grants.awaitable('read', key)) {
      const parked = grants.park('read', key, this.#peer!, runs, (refusal) => {
        this.#parked.delete(x);
        if (this.#conn.closed) return;
        if (refusal === null) this.#serveRead(link, x, runs, key);
        else this.#refuseRead(link, x, refusal);
      });
      if (typeof parked === 'function') {
        log.debug('READ %d from %s waits for read grant %s', x, this.#peer!.agentName, key);
        this.#parked.set(x, parked);
        return;
      }
      this.#refuseRead(link, x, parked);
      return;
    }
    this.#refuseRead(link, x, reason);
  }

  #refuseRead(link: PeerLink, x: number, reason: string): void {
    log.warn('refusing READ %d from %s: %s', x, this.#peer!.agentName, reason);
    void link.sendControl({ t: 'xfer_err', x, reason: `READ refused: ${reason}` }).catch(() => {});
  }

  #serveRead(link: PeerLink, x: number, runs: readonly BlockRun[], key: string | undefined): void {
    const c = this.#core;
    const peer = this.#peer!;
    const allowed = (run: BlockRun): string | null => c.grants.check('read', peer, [run], key);
    void sendRuns(link, c.regions, c.chunkBytes, x, runs, c.outgoingHook, allowed)
      .then(() => link.sendControl({ t: 'read_done', x }))
      .catch((e: unknown) => {
        if (!(e instanceof PermissionEndedError)) {
          this.#conn.close(`serving READ ${x} failed: ${String(e)}`);
          return;
        }
        log.warn('stopped serving READ %d to %s: %s', x, peer.agentName, e.message);
        void link.sendControl({ t: 'xfer_err', x, reason: `READ aborted: ${e.message}` }).catch(() => {});
      });
  }

  #onWrite(link: PeerLink, h: FrameHeader): void {
    const x = intField(h, 'x');
    if (this.#writes.has(x)) throw new ProtocolError(`duplicate transfer id ${x}`);
    const { runs, reason } = this.#refusal('write', h);
    if (reason !== null) {
      log.warn('refusing WRITE %d from %s: %s', x, this.#peer!.agentName, reason);
      this.#writes.set(x, null);
      void link.sendControl({ t: 'xfer_err', x, reason: `WRITE refused: ${reason}` }).catch(() => {});
      return;
    }
    this.#writes.set(x, {
      runs: new IncomingRuns(runs, this.#core.regions),
      blocks: runs,
      notification: optionalString(h, 'notif'),
      ended: null,
    });
  }

  #onData(link: PeerLink, h: FrameHeader, payload: Uint8Array | null): void {
    if (link.transport === 'shm' && h['so'] !== undefined) {
      const w = this.#liveWrite(h);
      const { view, ok } = link.landShm(h, w ? w.runs : null);
      if (w && view) w.runs.landed(h, view, ok);
      return;
    }
    // tcp: destination() already checked the grant and chose where the payload landed.
    const w = this.#writes.get(intField(h, 'x'));
    if (w && payload) w.runs.landed(h, payload, true);
  }

  #onWriteEnd(link: PeerLink, h: FrameHeader): void {
    const x = intField(h, 'x');
    const w = this.#writes.get(x);
    this.#writes.delete(x);
    if (!w) return;
    const { positions } = w.runs.failed();
    if (positions.length === 0 && w.notification !== undefined) {
      this.#core.deliver({ agent: this.#peer!.agentName, message: w.notification });
    }
    if (positions.length > 0)
      log.warn('WRITE %d from %s: %d blocks failed verification', x, this.#peer!.agentName, positions.length);
    void link.sendControl({ t: 'write_done', x, bad: positions }).catch(() => {});
  }
}

/** The blocks one data frame of a WRITE covers (descriptor `d`, offset `o`, `n` blocks). */
function frameRun(w: IncomingWrite, h: FrameHeader): BlockRun {
  const d = intField(h, 'd');
  const run = w.blocks[d];
  if (!run) throw new ProtocolError(`data frame outside descriptor ${d}`);
  return { region: run.region, first: run.first + intField(h, 'o'), count: intField(h, 'n') };
}
