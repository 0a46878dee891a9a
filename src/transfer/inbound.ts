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
import { type BlockRun, IncomingRuns, sendRuns } from './block-io.ts';
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
  readonly notification: string | undefined;
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
    this.#conn.onClose(() => {
      clearTimeout(timer);
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
        const w = this.#writes.get(intField(h, 'x'));
        if (!w) return null;
        const view = w.runs.destination(h);
        if (view.length !== length) throw new ProtocolError('data payload length does not match its blocks');
        return view;
      },
      progress: (h: FrameHeader, filled: number): void => {
        this.#writes.get(h['x'] as number)?.runs.progress(filled);
      },
      frame: (h: FrameHeader, payload: Uint8Array | null): void => this.#onFrame(h, payload),
    };
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
    if (reason === null) {
      this.#serveRead(link, x, runs);
      return;
    }
    const key = optionalString(h, 'grant');
    const grants = this.#core.grants;
    if (key !== undefined && runs.length > 0 && grants.awaitable('read', key)) {
      const parked = grants.park('read', key, this.#peer!, runs, (refusal) => {
        this.#parked.delete(x);
        if (this.#conn.closed) return;
        if (refusal === null) this.#serveRead(link, x, runs);
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

  #serveRead(link: PeerLink, x: number, runs: readonly BlockRun[]): void {
    const c = this.#core;
    void sendRuns(link, c.regions, c.chunkBytes, x, runs, c.outgoingHook)
      .then(() => link.sendControl({ t: 'read_done', x }))
      .catch((e: unknown) => this.#conn.close(`serving READ ${x} failed: ${String(e)}`));
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
      notification: optionalString(h, 'notif'),
    });
  }

  #onData(link: PeerLink, h: FrameHeader, payload: Uint8Array | null): void {
    const w = this.#writes.get(intField(h, 'x'));
    if (link.transport === 'shm' && h['so'] !== undefined) {
      const { view, ok } = link.landShm(h, w ? w.runs : null);
      if (w && view) w.runs.landed(h, view, ok);
      return;
    }
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
