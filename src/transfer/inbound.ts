/**
 * The serving side of a connection: authenticates the peer, then serves READs of granted
 * blocks from local memory and accepts WRITEs into granted blocks, and queues notifications.
 * A READ whose named grant does not exist yet is parked until the grant appears (bounded).
 */
import type { Socket } from 'node:net';
import { getLogger } from '../logging/logger.ts';
import type { AgentCore } from './agent-core.ts';
import { authProof, newNonce, verifyProof } from './auth.ts';
import { type BlockRun, IncomingRuns, PermissionEndedError, sendRuns } from './block-io.ts';
import { FramedConnection } from './connection.ts';
import { checkRun } from './descriptors.ts';
import { directRead } from './direct-read.ts';
import type { TransferFailure } from './failure.ts';
import type { GrantKind } from './grants.ts';
import { kvOffer, mapPeerOffer } from './kv-offer.ts';
import { type AgentFrame, type DataFrame, mappedPieces, parseAgentFrame, type WireRun } from './messages.ts';
import { PeerLink } from './peer-link.ts';
import { ProtocolError } from './protocol-error.ts';
import { checkRingPath, ShmRingReader, ShmRingWriter } from './shm-ring.ts';
import type { RegionGeometry } from './types.ts';

const log = getLogger('kvconnect.transfer.inbound');

type Hello = Extract<AgentFrame, { type: 'hello' }>;

interface IncomingWrite {
  readonly runs: IncomingRuns;
  readonly blocks: readonly BlockRun[];
  readonly notification: string | undefined;
  /** Why the receiver stopped accepting it (its write grant ended), if it did. */
  ended: string | null;
}

export class InboundSession {
  readonly #core: AgentCore;
  readonly #conn: FramedConnection<AgentFrame>;
  readonly #nonce = newNonce();
  #link: PeerLink | null = null;
  #peer: { agentName: string; engineId: string } | null = null;
  readonly #writes = new Map<number, IncomingWrite | null>();
  /** READs waiting for their grant to appear, by transfer id: the cancel of each. */
  readonly #parked = new Map<number, () => void>();
  /** The blocks a tcp WRITE data frame is landing in right now (its payload is split across reads). */
  #landing: BlockRun | null = null;

  constructor(core: AgentCore, socket: Socket) {
    this.#core = core;
    const label = `${socket.remoteAddress}:${socket.remotePort}→${core.agentName}`;
    this.#conn = new FramedConnection(socket, this.#sink(), parseAgentFrame, label, core.activity);
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
    this.#conn.send({ type: 'challenge', nonce: this.#nonce, auth: core.secret !== undefined });
  }

  get connection(): FramedConnection<AgentFrame> {
    return this.#conn;
  }

  #sink() {
    return {
      destination: (f: AgentFrame, length: number): Uint8Array | null => {
        if (f.type !== 'data' || f.ring || f.src) {
          if (length > 0) throw new ProtocolError(`unexpected payload on '${f.type}'`);
          return null;
        }
        const w = this.#liveWrite(f);
        if (!w) return null;
        const view = w.runs.destination(f);
        if (view.length !== length) throw new ProtocolError('data payload length does not match its blocks');
        this.#landing = frameRun(w, f);
        return view;
      },
      progress: (f: AgentFrame, filled: number): void => {
        if (f.type === 'data') this.#writes.get(f.xfer)?.runs.progress(filled);
      },
      frame: (f: AgentFrame, payload: Uint8Array | null): void => {
        this.#landing = null;
        this.#onFrame(f, payload);
      },
    };
  }

  /** The WRITE a data frame belongs to, if its blocks are still granted (else it is ended). */
  #liveWrite(f: DataFrame): IncomingWrite | null {
    const w = this.#writes.get(f.xfer);
    if (!w || w.ended !== null) return null;
    const refusal = this.#core.grants.check('write', this.#peer!, [frameRun(w, f)], undefined);
    if (refusal === null) return w;
    w.ended = refusal.reason;
    log.warn('WRITE %d from %s: dropping the rest, %s', f.xfer, this.#peer!.agentName, refusal.reason);
    return null;
  }

  #onFrame(f: AgentFrame, payload: Uint8Array | null): void {
    if (!this.#peer) {
      if (f.type !== 'hello') throw new ProtocolError(`'${f.type}' before the handshake`);
      this.#onHello(f);
      return;
    }
    const link = this.#link!;
    switch (f.type) {
      case 'ready':
        link.ringOut?.unlink();
        link.mappedByPeer = new Set(f.mapped ?? []);
        return;
      case 'read':
        this.#onRead(link, f.xfer, f.runs, f.grant);
        return;
      case 'write':
        this.#onWrite(link, f);
        return;
      case 'data':
        this.#onData(link, f, payload);
        return;
      case 'mapped':
        for (const piece of mappedPieces(f)) this.#onData(link, piece, null);
        return;
      case 'write_end':
        this.#onWriteEnd(link, f.xfer);
        return;
      case 'notif':
        this.#core.deliver({ agent: this.#peer.agentName, message: f.message });
        return;
      case 'ack':
        link.onAck(f.count);
        return;
      default:
        throw new ProtocolError(`unexpected message '${f.type}'`);
    }
  }

  #onHello(f: Hello): void {
    const secret = this.#core.secret;
    if (secret !== undefined && !verifyProof(secret, 'client', this.#nonce, f.nonce, f.proof)) {
      log.warn('refusing agent %s: authentication failed', f.agent);
      this.#conn.send({ type: 'error', reason: 'authentication failed (shared secret mismatch)' });
      this.#conn.socket.end();
      return;
    }
    const link = new PeerLink(this.#conn, f.transport);
    let mapped: number[] | undefined;
    if (f.transport === 'shm') {
      link.ringIn = new ShmRingReader(checkRingPath(f.ring, this.#core.shmDir));
      link.ringOut = new ShmRingWriter(this.#core.shmDir, this.#core.ringBytes);
      // The client's KV, and its lease table: with both, this side pulls the client's WRITEs.
      mapPeerOffer(link, f);
      mapped = link.peerKv?.regions;
    }
    this.#link = link;
    this.#peer = { agentName: f.agent, engineId: f.engine };
    this.#conn.send({
      type: 'welcome',
      agent: this.#core.agentName,
      ...(secret === undefined ? {} : { proof: authProof(secret, 'server', this.#nonce, f.nonce) }),
      ...(link.ringOut ? { ring: link.ringOut.path } : {}),
      ...kvOffer(this.#core, link),
      ...(mapped ? { mapped } : {}),
      ...(link.direct ? { pulls: true } : {}),
    });
  }

  /** Bounds-checks the runs against local regions; null with the reason when one is outside them. */
  #runs(wire: readonly WireRun[]): { runs: BlockRun[]; outside: string | null } {
    const geometry = this.#core.regions as ReadonlyMap<number, RegionGeometry>;
    try {
      const runs = wire.map(([region, first, count]) => {
        checkRun(geometry, region, first, count, 'local');
        return { region, first, count };
      });
      return { runs, outside: null };
    } catch (e) {
      return { runs: [], outside: e instanceof Error ? e.message : String(e) };
    }
  }

  #refusal(
    kind: GrantKind,
    wire: readonly WireRun[],
    grant: string | undefined,
  ): { runs: BlockRun[]; refusal: TransferFailure | null } {
    const { runs, outside } = this.#runs(wire);
    if (outside !== null) return { runs, refusal: { cause: 'out_of_bounds', reason: outside } };
    const check = () => this.#core.grants.check(kind, this.#peer!, runs, grant);
    let refusal = check();
    // Grants issued before the peer could know of the blocks, not applied yet (the agent thread
    // reads its socket before its command port): apply them, then decide.
    if (refusal !== null && this.#core.grantMissed()) refusal = check();
    return { runs, refusal };
  }

  #onRead(link: PeerLink, xfer: number, wire: readonly WireRun[], key: string | undefined): void {
    if (this.#parked.has(xfer)) throw new ProtocolError(`duplicate transfer id ${xfer}`);
    const arrived = performance.now();
    const { runs, refusal } = this.#refusal('read', wire, key);
    if (refusal === null) {
      this.#serveRead(link, xfer, runs, key, arrived);
      return;
    }
    const grants = this.#core.grants;
    if (key !== undefined && runs.length > 0 && grants.awaitable('read', key)) {
      const parked = grants.park('read', key, this.#peer!, runs, (outcome) => {
        this.#parked.delete(xfer);
        if (this.#conn.closed) return;
        if (outcome === null) this.#serveRead(link, xfer, runs, key, arrived);
        else this.#refuseRead(link, xfer, outcome);
      });
      if (typeof parked === 'function') {
        log.debug('READ %d from %s waits for read grant %s', xfer, this.#peer!.agentName, key);
        this.#parked.set(xfer, parked);
        return;
      }
      this.#refuseRead(link, xfer, parked);
      return;
    }
    this.#refuseRead(link, xfer, refusal);
  }

  #refuseRead(link: PeerLink, xfer: number, refusal: TransferFailure): void {
    log.warn('refusing READ %d from %s: %s', xfer, this.#peer!.agentName, refusal.reason);
    void link
      .sendControl({
        type: 'xfer_err',
        xfer,
        cause: refusal.cause,
        reason: `READ refused: ${refusal.reason}`,
      })
      .catch(() => {});
  }

  /**
   * Sends every block, or closes the connection (so the reader never waits for a missing
   * block), or, when the grant ends part-way, stops and tells the reader the READ failed.
   */
  #serveRead(
    link: PeerLink,
    xfer: number,
    runs: readonly BlockRun[],
    key: string | undefined,
    arrived: number,
  ): void {
    const c = this.#core;
    const peer = this.#peer!;
    const allowed = (run: BlockRun): TransferFailure | null => c.grants.check('read', peer, [run], key);
    // Checksums from the grant (lease table) or recorded when the engine filled the blocks.
    const recorded = (run: BlockRun): number[] | null =>
      c.leases()?.sums(run.region, run.first, run.count) ?? c.records.sums(run.region, run.first, run.count);
    sendRuns(link, c.regions, c.chunkBytes, xfer, runs, {
      transform: c.outgoing,
      heldSince: arrived,
      allowed,
      recorded,
    }).catch((e: unknown) => {
      if (!(e instanceof PermissionEndedError)) {
        this.#conn.close(`serving READ ${xfer} failed: ${String(e)}`);
        return;
      }
      log.warn('stopped serving READ %d to %s: %s', xfer, peer.agentName, e.message);
      const { cause } = e.refusal;
      void link
        .sendControl({ type: 'xfer_err', xfer, cause, reason: `READ aborted: ${e.message}` })
        .catch(() => {});
    });
  }

  #onWrite(link: PeerLink, f: Extract<AgentFrame, { type: 'write' }>): void {
    const { xfer, notif: notification } = f;
    if (this.#writes.has(xfer)) throw new ProtocolError(`duplicate transfer id ${xfer}`);
    const { runs, refusal } = this.#refusal('write', f.runs, undefined);
    if (refusal !== null) {
      log.warn('refusing WRITE %d from %s: %s', xfer, this.#peer!.agentName, refusal.reason);
      this.#writes.set(xfer, null);
      const reason = `WRITE refused: ${refusal.reason}`;
      void link.sendControl({ type: 'xfer_err', xfer, cause: refusal.cause, reason }).catch(() => {});
      return;
    }
    // The WRITE lands data in these blocks: whatever was recorded of them no longer holds.
    for (const r of runs) this.#core.records.forgetRun(r.region, r.first, r.count);
    const w: IncomingWrite = {
      runs: new IncomingRuns(runs, this.#core.regions),
      blocks: runs,
      notification,
      ended: null,
    };
    this.#writes.set(xfer, w);
    if (f.pull !== undefined && f.src !== undefined) this.#pull(link, xfer, w, f.pull, f.src);
  }

  /**
   * A pulled WRITE (same host, recorded blocks): the sender leased its blocks to us under
   * `key`; copy them as a direct READ does (checked against the sender's lease table, hashed
   * while copied, compared with its checksums) and answer at once. The write grant was checked
   * just before, in the same synchronous run, so it cannot end in between. Anything the table
   * cannot decide is declined, and the sender sends the blocks instead.
   */
  #pull(link: PeerLink, xfer: number, w: IncomingWrite, key: string, src: readonly WireRun[]): void {
    const descs = w.blocks.map((r, i) => {
      const [region, first, count] = src[i]!;
      if (count !== r.count)
        throw new ProtocolError(`WRITE ${xfer}: run ${i} of the sender has another length`);
      return { localRegion: r.region, localFirst: r.first, remoteRegion: region, remoteFirst: first, count };
    });
    const declined = link.direct
      ? directRead(link.direct, this.#core, this.#core.regions, descs, key)
      : "this side has not mapped the sender's lease table";
    if (declined === null) {
      w.runs.allVerified();
      this.#onWriteEnd(link, xfer);
      return;
    }
    log.debug('WRITE %d from %s is not pulled: %s', xfer, this.#peer!.agentName, declined);
    void link.sendControl({ type: 'pull_declined', xfer, reason: declined }).catch(() => {});
  }

  #onData(link: PeerLink, f: DataFrame, payload: Uint8Array | null): void {
    if (link.transport === 'shm' || f.ring || f.src) {
      // The copy happens now, synchronously: a grant checked here cannot end before it is done.
      const w = this.#liveWrite(f);
      const { view, ok, sums } = link.landShm(f, w ? w.runs : null);
      if (w && view) w.runs.landed(f, view, ok, sums);
      return;
    }
    // tcp: destination() already checked the grant and chose where the payload landed.
    const w = this.#writes.get(f.xfer);
    if (w && payload) w.runs.landed(f, payload, true);
  }

  #onWriteEnd(link: PeerLink, xfer: number): void {
    const w = this.#writes.get(xfer);
    this.#writes.delete(xfer);
    if (!w) return;
    const { positions } = w.runs.failed();
    if (positions.length === 0 && w.notification !== undefined) {
      this.#core.deliver({ agent: this.#peer!.agentName, message: w.notification });
    }
    if (positions.length > 0)
      log.warn(
        'WRITE %d from %s: %d blocks failed verification',
        xfer,
        this.#peer!.agentName,
        positions.length,
      );
    void link.sendControl({ type: 'write_done', xfer, bad: positions }).catch(() => {});
  }
}

/** The blocks one data frame of a WRITE covers. */
function frameRun(w: IncomingWrite, f: DataFrame): BlockRun {
  const run = w.blocks[f.run];
  if (!run) throw new ProtocolError(`data frame outside run ${f.run}`);
  return { region: run.region, first: run.first + f.block, count: f.count };
}
