/**
 * The initiating side: one connection per remote agent, opened on first use. Posts READs
 * (the peer streams the blocks back; each lands straight in local memory and is verified)
 * and WRITEs (blocks stream out; the peer verifies and answers with the bad ones), keeps
 * every transfer's state, and fails in-flight transfers when the connection dies.
 */
import { connect } from 'node:net';
import { getLogger } from '../logging/logger.ts';
import { readEnv } from '../util/envs.ts';
import { localBlocks } from './agent-checks.ts';
import type { AgentCore } from './agent-core.ts';
import { type BlockRun, type IncomingRuns, sendRuns } from './block-io.ts';
import { ClientHandshake } from './client-handshake.ts';
import { FramedConnection, zeroCopyRead } from './connection.ts';
import { directRead } from './direct-read.ts';
import type { TransferFailure, TransferFailureCause } from './failure.ts';
import { type AgentFrame, type DataFrame, type Mutable, mappedPieces, parseAgentFrame } from './messages.ts';
import { PeerLink } from './peer-link.ts';
import { ProtocolError } from './protocol-error.ts';
import type { AgentMetadata, DescPair, FailedBlocks, TransportName } from './types.ts';

const log = getLogger('kvconnect.transfer.outbound');

export interface OutboundTransfer {
  readonly id: number;
  readonly kind: 'READ' | 'WRITE';
  readonly descs: readonly DescPair[];
  readonly bytes: number;
  readonly notification: string | undefined;
  readonly postedAt: number;
  readonly deadline: number;
  postSeconds: number;
  /** How long the peer held a READ before serving it (it reports this in the first data frame). */
  heldSeconds: number;
  /** How long the transfer waited for the connection to the peer (connect and handshake) before it could leave. */
  setupSeconds: number;
  /** Local runs; for READ also the per-block verdicts. */
  readonly incoming: IncomingRuns;
  state: 'PROC' | 'DONE' | 'ERR';
  failed: FailedBlocks[];
  failure?: TransferFailure;
  finishedAt?: number;
  /** A pulled WRITE: the key of the lease published for the receiver, until the WRITE ends. */
  pullKey?: string | undefined;
  /** The receiver pulled this WRITE (it did not decline). */
  pulled?: boolean;
}

export type FinishListener = (t: OutboundTransfer) => void;

/** Lease keys of pulled WRITEs (one per transfer id; user grant keys are other strings). */
const PULL_KEY_PREFIX = 'kvconnect-write-pull:';

const CHECKSUM_MISMATCH: TransferFailure = { cause: 'checksum', reason: 'block checksum mismatch' };

export class OutboundPeer {
  readonly meta: AgentMetadata;
  readonly #core: AgentCore;
  readonly #link: PeerLink;
  readonly #handshake: ClientHandshake;
  readonly #inflight = new Map<number, OutboundTransfer>();
  readonly #onFinish: FinishListener;
  /** The READ whose tcp data frame is landing in local memory right now (its payload is split across reads). */
  #landing: number | null = null;
  /** performance.now() of the last frame or payload bytes from the peer. */
  #lastHeard = performance.now();
  /** What in-flight transfers fail with when the connection ends: set when this side closes it. */
  #closeCause: TransferFailureCause = 'connection_lost';

  constructor(
    core: AgentCore,
    meta: AgentMetadata,
    transport: TransportName,
    connectTimeoutMs: number,
    onFinish: FinishListener,
  ) {
    this.#core = core;
    this.meta = meta;
    this.#onFinish = onFinish;
    let conn: FramedConnection<AgentFrame> | undefined;
    const socket = connect({
      host: meta.endpoints.tcp.host,
      port: meta.endpoints.tcp.port,
      onread: zeroCopyRead(() => conn),
    });
    conn = new FramedConnection<AgentFrame>(
      socket,
      {
        destination: (f, length) => this.#destination(f, length),
        progress: (f, filled) => {
          this.#lastHeard = performance.now();
          if (f.type === 'data') this.#reading(f.xfer)?.incoming.progress(filled);
        },
        frame: (f, payload) => {
          this.#landing = null;
          this.#lastHeard = performance.now();
          if (this.#handshake.done) this.#onFrame(f, payload);
          else this.#handshake.onFrame(f);
        },
      },
      parseAgentFrame,
      `${core.agentName}→${meta.agentName}`,
      core.activity,
    );
    this.#link = new PeerLink(conn, transport);
    this.#handshake = new ClientHandshake(core, this.#link, meta.agentName, connectTimeoutMs);
    conn.onClose((reason) => {
      const failure = { cause: this.#closeCause, reason: `connection to ${meta.agentName} lost: ${reason}` };
      for (const t of [...this.#inflight.values()]) this.#finish(t, failure);
    });
  }

  get closed(): boolean {
    return this.#link.conn.closed;
  }

  /** Waits for the handshake (rejects with the reason the connection failed). */
  ready(): Promise<void> {
    return this.#handshake.ready;
  }

  post(t: OutboundTransfer, grantKey: string | undefined): void {
    this.#inflight.set(t.id, t);
    if (!this.#handshake.done) {
      // Not time on the wire (vLLM's NIXL handshakes before it posts a transfer).
      this.#handshake.ready.then(
        () => {
          t.setupSeconds = (performance.now() - t.postedAt) / 1000;
        },
        () => {},
      );
    }
    const runs = t.descs.map((d) => [d.remoteRegion, d.remoteFirst, d.count] as const);
    // A READ lands data in its local blocks: whatever was recorded of them no longer holds.
    if (t.kind === 'READ')
      for (const d of t.descs) this.#core.records.forgetRun(d.localRegion, d.localFirst, d.count);
    const fail = this.#failer(t);
    const link = this.#link;
    if (t.kind === 'READ') {
      const request = (): void => {
        const f: Mutable<AgentFrame & { type: 'read' }> = { type: 'read', xfer: t.id, runs };
        if (grantKey !== undefined) f.grant = grantKey;
        link.sendControl(f).catch(fail);
      };
      if (!this.#handshake.done || link.direct === null) {
        request();
        return;
      }
      // Same host, the owner's KV and lease table mapped: serve the READ here, after read() returns.
      queueMicrotask(() => {
        if (t.state !== 'PROC') return;
        const direct = link.direct;
        const declined = direct
          ? directRead(direct, this.#core, this.#core.regions, t.descs, grantKey)
          : 'connection closed';
        if (declined === null) {
          t.incoming.allVerified();
          this.#finish(t, undefined);
        } else {
          log.debug('READ %d from %s asks the owner: %s', t.id, this.meta.agentName, declined);
          request();
        }
      });
      return;
    }
    const write: Mutable<AgentFrame & { type: 'write' }> = { type: 'write', xfer: t.id, runs };
    if (t.notification !== undefined) write.notif = t.notification;
    const pull = this.#publishPull(t);
    if (pull !== null) {
      // The receiver copies the blocks itself (or declines, and they are sent then).
      write.pull = pull;
      write.src = t.descs.map((d) => [d.localRegion, d.localFirst, d.count] as const);
      link.sendControl(write).catch(fail);
      return;
    }
    const send = (): void => {
      link.sendControl(write).catch(fail);
      this.#sendWriteBlocks(t);
    };
    // Sends are queued in order on the link. A WRITE of one chunk leaves in one syscall;
    // a larger one must not hold its first chunks back while later ones are hashed.
    if (t.bytes <= this.#core.chunkBytes) link.corked(send);
    else send();
  }

  /** What ends transfer `t` when one of its sends fails. */
  #failer(t: OutboundTransfer): (e: unknown) => void {
    return (e) =>
      this.#finish(t, {
        cause: 'send_failed',
        reason: `sending failed: ${e instanceof Error ? e.message : String(e)}`,
      });
  }

  /** A WRITE's blocks and its end marker, after the `write` frame. */
  #sendWriteBlocks(t: OutboundTransfer): void {
    const c = this.#core;
    const link = this.#link;
    const fail = this.#failer(t);
    const local: BlockRun[] = t.descs.map((d) => ({
      region: d.localRegion,
      first: d.localFirst,
      count: d.count,
    }));
    sendRuns(link, c.regions, c.chunkBytes, t.id, local, {
      transform: c.outgoing,
      // Checksums recorded when the engine wrote the blocks: nothing to hash on the way.
      recorded: (run) => c.records.sums(run.region, run.first, run.count),
    }).catch(fail);
    link.sendControl({ type: 'write_end', xfer: t.id }).catch(fail);
  }

  /**
   * A same-host WRITE of recorded blocks to a peer that mapped our KV and lease table: the
   * blocks are leased to the peer (their recorded checksums in the lease table, nothing
   * hashed) under a key of their own, so the peer copies them the way it serves a direct
   * READ. Returns the key, or null when the WRITE is sent instead.
   */
  #publishPull(t: OutboundTransfer): string | null {
    const c = this.#core;
    const table = c.leases();
    const link = this.#link;
    if (table === null || !link.peerPulls || link.transport !== 'shm' || c.outgoing) return null;
    if (readEnv('KVCONNECT_DISABLE_WRITE_PULL')) return null;
    for (const d of t.descs) if (!c.records.hasAll(d.localRegion, d.localFirst, d.count)) return null;
    const key = `${PULL_KEY_PREFIX}${t.id}`;
    // Every region names the same blocks: each id once.
    const ids = new Set<number>();
    for (const d of t.descs) for (let b = d.localFirst; b < d.localFirst + d.count; b++) ids.add(b);
    const expiresAt = Date.now() + Math.max(0, t.deadline - performance.now());
    table.publish(key, ids, this.meta.agentName, expiresAt, true);
    t.pullKey = key;
    return key;
  }

  /** Ends a pulled WRITE's lease (the WRITE ended, or the peer declined to pull it). */
  #withdrawPull(t: OutboundTransfer): void {
    if (t.pullKey === undefined) return;
    this.#core.leases()?.withdraw(t.pullKey);
    t.pullKey = undefined;
  }

  notify(message: string): Promise<void> {
    return this.#link.sendControl({ type: 'notif', message });
  }

  /**
   * Fails a transfer whose deadline passed (called when its status is polled). The
   * connection is closed too when the rest of a frame of this READ could still land in
   * memory that is no longer its own, or when nothing at all arrived while it was in
   * flight (a stopped peer, a partition, a half-open connection): the next transfer then
   * opens a fresh connection instead of waiting on a dead one.
   */
  expire(t: OutboundTransfer): void {
    const ms = Math.round(t.deadline - t.postedAt);
    const midFrame = this.#landing === t.id;
    const silent = this.#lastHeard < t.postedAt;
    this.#finish(t, { cause: 'timeout', reason: `transfer timed out after ${ms} ms` });
    if (midFrame || silent) {
      const why = midFrame ? 'in the middle of one of its data frames' : `with nothing received for ${ms} ms`;
      log.warn('closing connection to %s: %s %d timed out %s', this.meta.agentName, t.kind, t.id, why);
      this.close(`${t.kind} ${t.id} timed out ${why}`);
    }
  }

  /** Closes the connection; its in-flight transfers fail with `cause` (the agent was closed, or the connection dropped). */
  close(reason: string, cause: TransferFailureCause = 'connection_lost'): void {
    if (!this.#link.conn.closed) this.#closeCause = cause;
    this.#link.conn.close(reason);
  }

  #reading(xfer: number): OutboundTransfer | undefined {
    const t = this.#inflight.get(xfer);
    return t?.kind === 'READ' ? t : undefined;
  }

  /** Where a READ's tcp payload lands: straight in local memory. */
  #destination(f: AgentFrame, length: number): Uint8Array | null {
    if (f.type !== 'data' || f.ring || f.src) {
      if (length > 0) throw new ProtocolError(`unexpected payload on '${f.type}'`);
      return null;
    }
    const t = this.#reading(f.xfer);
    if (!t) return null;
    const view = t.incoming.destination(f);
    if (view.length !== length) throw new ProtocolError('data payload length does not match its blocks');
    this.#landing = t.id;
    return view;
  }

  #onFrame(f: AgentFrame, payload: Uint8Array | null): void {
    switch (f.type) {
      case 'ack':
        this.#link.onAck(f.count);
        return;
      case 'data':
        this.#onData(f, payload);
        return;
      case 'mapped':
        for (const piece of mappedPieces(f)) this.#onData(piece, null);
        return;
      case 'write_done': {
        const t = this.#inflight.get(f.xfer);
        if (t) this.#onWriteDone(t, f.bad);
        return;
      }
      case 'xfer_err': {
        const t = this.#inflight.get(f.xfer);
        if (t) this.#finish(t, { cause: f.cause, reason: f.reason }, true);
        return;
      }
      case 'pull_declined': {
        const t = this.#inflight.get(f.xfer);
        if (t?.kind !== 'WRITE' || t.pullKey === undefined) return;
        log.debug(
          'WRITE %d to %s is sent: the peer did not pull it (%s)',
          t.id,
          this.meta.agentName,
          f.reason,
        );
        this.#withdrawPull(t);
        this.#sendWriteBlocks(t);
        return;
      }
      default:
        throw new ProtocolError(`unexpected message '${f.type}'`);
    }
  }

  /**
   * A READ completes when its last block has landed (verified or not): the server sends every
   * block or closes the connection, so there is no end marker to wait for.
   */
  #onData(f: DataFrame, payload: Uint8Array | null): void {
    const t = this.#reading(f.xfer);
    if (t && f.held !== undefined) t.heldSeconds = f.held / 1e6;
    if (this.#link.transport === 'shm' || f.ring || f.src) {
      const { view, ok, sums } = this.#link.landShm(f, t ? t.incoming : null);
      if (t && view) t.incoming.landed(f, view, ok, sums);
    } else if (t && payload) {
      t.incoming.landed(f, payload, true);
    }
    if (t?.incoming.complete) this.#finish(t, undefined);
  }

  #onWriteDone(t: OutboundTransfer, bad: readonly (readonly [number, number])[]): void {
    if (bad.length === 0) {
      this.#finish(t, undefined, false, []);
      return;
    }
    const sent = new Set(t.incoming.failed().positions.map(([d, o]) => `${d}:${o}`));
    const positions = bad.filter(([d, o]) => sent.has(`${d}:${o}`));
    this.#finish(
      t,
      {
        cause: 'checksum',
        reason: `${positions.length} block(s) failed checksum verification at the receiver`,
      },
      false,
      positions,
    );
  }

  /**
   * Completes a transfer once. READ failures are the blocks not verified locally; WRITE
   * failures are the positions the receiver rejected (or every block if we cannot know).
   */
  #finish(
    t: OutboundTransfer,
    failure: TransferFailure | undefined,
    allFailed = false,
    writeBad?: readonly (readonly [number, number])[],
  ): void {
    if (!this.#inflight.delete(t.id) || t.state !== 'PROC') return;
    t.finishedAt = performance.now();
    t.pulled = t.pullKey !== undefined;
    this.#withdrawPull(t);
    let failed: FailedBlocks[];
    if (t.kind === 'READ') {
      failed = allFailed ? localBlocks(t.descs) : t.incoming.failed().byRegion;
      // Every block landed and verified: the data is valid whatever happened afterwards.
      if (failed.length === 0) failure = undefined;
      else failure ??= CHECKSUM_MISMATCH;
    } else {
      failed = localBlocks(t.descs, writeBad);
    }
    if (failure === undefined) {
      t.state = 'DONE';
      if (t.kind === 'READ' && t.notification !== undefined) {
        this.notify(t.notification).catch(() => {});
      }
    } else {
      t.state = 'ERR';
      t.failed = failed;
      t.failure = failure;
      log.warn('%s %d to %s failed: %s', t.kind, t.id, this.meta.agentName, failure.reason);
    }
    this.#onFinish(t);
  }
}
