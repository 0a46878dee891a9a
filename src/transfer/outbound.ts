/**
 * The initiating side: one connection per remote agent, opened on first use. Posts READs
 * (the peer streams the blocks back; each lands straight in local memory and is verified)
 * and WRITEs (blocks stream out; the peer verifies and answers with the bad ones), keeps
 * every transfer's state, and fails in-flight transfers when the connection dies.
 */
import { connect } from 'node:net';
import { KVError } from '../errors/index.ts';
import { getLogger } from '../logging/logger.ts';
import type { AgentCore } from './agent-core.ts';
import { authProof, newNonce, verifyProof } from './auth.ts';
import { type BlockRun, type IncomingRuns, sendRuns } from './block-io.ts';
import { FramedConnection, ProtocolError, zeroCopyRead } from './connection.ts';
import type { FrameHeader } from './framing.ts';
import { intField, PeerLink, stringField } from './peer-link.ts';
import { ShmRingReader, ShmRingWriter } from './shm-ring.ts';
import type { AgentMetadata, DescPair, FailedBlocks, TransportName } from './types.ts';

const log = getLogger('transfer');

export interface OutboundTransfer {
  readonly id: number;
  readonly kind: 'READ' | 'WRITE';
  readonly descs: readonly DescPair[];
  readonly bytes: number;
  readonly notification: string | undefined;
  readonly postedAt: number;
  readonly deadline: number;
  postSeconds: number;
  /** Local runs; for READ also the per-block verdicts. */
  readonly incoming: IncomingRuns;
  state: 'PROC' | 'DONE' | 'ERR';
  failed: FailedBlocks[];
  reason?: string;
  finishedAt?: number;
}

export type FinishListener = (t: OutboundTransfer) => void;

export class OutboundPeer {
  readonly meta: AgentMetadata;
  readonly transport: TransportName;
  readonly #core: AgentCore;
  readonly #link: PeerLink;
  readonly #ready: Promise<void>;
  readonly #inflight = new Map<number, OutboundTransfer>();
  readonly #onFinish: FinishListener;
  /** The READ whose data frame is landing in local memory right now (its payload is split across reads). */
  #landing: number | null = null;
  /** performance.now() of the last frame or payload bytes from the peer. */
  #lastHeard = performance.now();

  constructor(
    core: AgentCore,
    meta: AgentMetadata,
    transport: TransportName,
    connectTimeoutMs: number,
    onFinish: FinishListener,
  ) {
    this.#core = core;
    this.meta = meta;
    this.transport = transport;
    this.#onFinish = onFinish;
    let connRef: FramedConnection | undefined;
    const socket = connect({
      host: meta.endpoints.tcp.host,
      port: meta.endpoints.tcp.port,
      onread: zeroCopyRead(() => connRef),
    });
    let resolveReady!: () => void;
    let rejectReady!: (e: Error) => void;
    this.#ready = new Promise((res, rej) => {
      resolveReady = res;
      rejectReady = rej;
    });
    this.#ready.catch(() => {});
    const nonce = newNonce();
    let serverNonce = '';
    let handshaken = false;
    const conn = new FramedConnection(
      socket,
      {
        destination: (h, length) => {
          if (h.t !== 'data' || h['so'] !== undefined) {
            if (length > 0) throw new ProtocolError(`unexpected payload on '${h.t}'`);
            return null;
          }
          const t = this.#inflight.get(intField(h, 'x'));
          if (t?.kind !== 'READ') return null;
          const view = t.incoming.destination(h);
          if (view.length !== length)
            throw new ProtocolError('data payload length does not match its blocks');
          this.#landing = t.id;
          return view;
        },
        progress: (h, filled) => {
          this.#lastHeard = performance.now();
          const t = this.#inflight.get(h['x'] as number);
          if (t?.kind === 'READ') t.incoming.progress(filled);
        },
        frame: (h, payload) => {
          this.#landing = null;
          this.#lastHeard = performance.now();
          if (handshaken) return this.#onFrame(h, payload);
          if (h.t === 'error') throw new ProtocolError(stringField(h, 'reason'));
          if (h.t === 'challenge') {
            serverNonce = stringField(h, 'nonce');
            const secret = core.secret;
            if (secret !== undefined && h['auth'] !== true) {
              throw new ProtocolError('peer does not authenticate but a shared secret is configured here');
            }
            conn.send({
              t: 'hello',
              agent: core.agentName,
              engine: core.engineId,
              nonce,
              transport,
              ...(secret === undefined ? {} : { proof: authProof(secret, 'client', serverNonce, nonce) }),
              ...(this.#link.ringOut ? { ring: this.#link.ringOut.path } : {}),
            });
            return;
          }
          if (h.t !== 'welcome') throw new ProtocolError(`'${h.t}' before the handshake`);
          if (
            core.secret !== undefined &&
            !verifyProof(core.secret, 'server', serverNonce, nonce, h['proof'])
          ) {
            throw new ProtocolError('peer failed authentication (shared secret mismatch)');
          }
          if (transport === 'shm') {
            this.#link.ringIn = new ShmRingReader(stringField(h, 'ring'));
            this.#link.ringOut?.unlink();
            conn.send({ t: 'ready' });
          }
          handshaken = true;
          resolveReady();
        },
      },
      `${core.agentName}→${meta.agentName}`,
    );
    connRef = conn;
    this.#link = new PeerLink(conn, transport);
    if (transport === 'shm') this.#link.ringOut = new ShmRingWriter(core.shmDir, core.ringBytes);
    this.#link.gate(this.#ready);
    const timer = setTimeout(
      () => conn.close(`handshake with ${meta.agentName} timed out`),
      connectTimeoutMs,
    );
    timer.unref();
    void this.#ready.then(
      () => clearTimeout(timer),
      () => clearTimeout(timer),
    );
    conn.onClose((reason) => {
      clearTimeout(timer);
      rejectReady(new Error(reason));
      for (const t of [...this.#inflight.values()])
        this.#finish(t, `connection to ${meta.agentName} lost: ${reason}`);
    });
  }

  get closed(): boolean {
    return this.#link.conn.closed;
  }

  get inflight(): number {
    return this.#inflight.size;
  }

  /** Waits for the handshake (rejects with the reason the connection failed). */
  ready(): Promise<void> {
    return this.#ready;
  }

  post(t: OutboundTransfer, grantKey: string | undefined): void {
    this.#inflight.set(t.id, t);
    const descs = t.descs.map((d) => [d.remoteRegion, d.remoteFirst, d.count]);
    const fail = (e: unknown): void =>
      this.#finish(t, `sending failed: ${e instanceof Error ? e.message : String(e)}`);
    if (t.kind === 'READ') {
      void this.#link
        .sendControl({ t: 'read', x: t.id, descs, ...(grantKey === undefined ? {} : { grant: grantKey }) })
        .catch(fail);
      return;
    }
    const link = this.#link;
    const runs: BlockRun[] = t.descs.map((d) => ({
      region: d.localRegion,
      first: d.localFirst,
      count: d.count,
    }));
    void link
      .sendControl({
        t: 'write',
        x: t.id,
        descs,
        ...(t.notification === undefined ? {} : { notif: t.notification }),
      })
      .then(() =>
        sendRuns(link, this.#core.regions, this.#core.chunkBytes, t.id, runs, this.#core.outgoingHook),
      )
      .then(() => link.sendControl({ t: 'write_end', x: t.id }))
      .catch(fail);
  }

  notify(message: string): Promise<void> {
    return this.#link.sendControl({ t: 'notif', m: message });
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
    this.#finish(t, `transfer timed out after ${ms} ms`);
    if (midFrame || silent) {
      const why = midFrame ? 'in the middle of one of its data frames' : `with nothing received for ${ms} ms`;
      log.warn('closing connection to %s: %s %d timed out %s', this.meta.agentName, t.kind, t.id, why);
      this.close(`${t.kind} ${t.id} timed out ${why}`);
    }
  }

  close(reason: string): void {
    this.#link.conn.close(reason);
  }

  #onFrame(h: FrameHeader, payload: Uint8Array | null): void {
    const link = this.#link;
    if (h.t === 'ack') {
      link.onAck(h);
      return;
    }
    const t = this.#inflight.get(intField(h, 'x'));
    switch (h.t) {
      case 'data': {
        if (link.transport === 'shm' && h['so'] !== undefined) {
          const { view, ok } = link.landShm(h, t?.kind === 'READ' ? t.incoming : null);
          if (t && view) t.incoming.landed(h, view, ok);
        } else if (t && payload) {
          t.incoming.landed(h, payload, true);
        }
        return;
      }
      case 'read_done':
        if (t) this.#finish(t, t.incoming.complete ? undefined : 'short read: some blocks never arrived');
        return;
      case 'write_done':
        if (t) this.#onWriteDone(t, h);
        return;
      case 'xfer_err':
        if (t) this.#finish(t, stringField(h, 'reason'), true);
        return;
      default:
        throw new ProtocolError(`unknown message '${h.t}'`);
    }
  }

  #onWriteDone(t: OutboundTransfer, h: FrameHeader): void {
    const bad = h['bad'];
    if (!Array.isArray(bad)) throw new ProtocolError('write_done without a bad-block list');
    for (const p of bad as unknown[]) {
      if (!Array.isArray(p) || p.length !== 2) throw new ProtocolError('bad write_done entry');
    }
    const all = t.incoming.failed().positions;
    if (bad.length === 0) {
      this.#finish(t, undefined, false, []);
      return;
    }
    const badSet = new Set((bad as [number, number][]).map(([d, o]) => `${d}:${o}`));
    const positions = all.filter(([d, o]) => badSet.has(`${d}:${o}`));
    this.#finish(
      t,
      `${positions.length} block(s) failed checksum verification at the receiver`,
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
    reason: string | undefined,
    allFailed = false,
    writeBad?: [number, number][],
  ): void {
    if (!this.#inflight.delete(t.id) || t.state !== 'PROC') return;
    t.finishedAt = performance.now();
    let failed: FailedBlocks[];
    if (t.kind === 'READ') {
      failed = allFailed ? allBlocks(t.descs) : t.incoming.failed().byRegion;
      if (reason === undefined && failed.length > 0) reason = 'block checksum mismatch';
      // Every block landed and verified: the data is valid even if the end marker was lost.
      if (failed.length === 0) reason = undefined;
    } else {
      failed = writeBad === undefined ? allBlocks(t.descs) : positionsToBlocks(t.descs, writeBad);
    }
    if (reason === undefined && failed.length === 0) {
      t.state = 'DONE';
      if (t.kind === 'READ' && t.notification !== undefined) {
        this.notify(t.notification).catch(() => {});
      }
    } else {
      t.state = 'ERR';
      t.failed = failed;
      t.reason = reason ?? 'transfer failed';
      log.warn('%s %d to %s failed: %s', t.kind, t.id, this.meta.agentName, t.reason);
    }
    this.#onFinish(t);
  }
}

function allBlocks(descs: readonly DescPair[]): FailedBlocks[] {
  return positionsToBlocks(
    descs,
    descs.flatMap((d, i) => Array.from({ length: d.count }, (_, o) => [i, o] as [number, number])),
  );
}

function positionsToBlocks(
  descs: readonly DescPair[],
  positions: readonly [number, number][],
): FailedBlocks[] {
  const per = new Map<number, number[]>();
  for (const [d, o] of positions) {
    const desc = descs[d];
    if (!desc || o >= desc.count) continue;
    let list = per.get(desc.localRegion);
    if (!list) {
      list = [];
      per.set(desc.localRegion, list);
    }
    list.push(desc.localFirst + o);
  }
  return [...per].map(([region, blockIds]) => ({ region, blockIds }));
}

export function unreachable(agent: string): KVError {
  return new KVError('TRANSFER_UNKNOWN_AGENT', `remote agent '${agent}' is not known`, {
    hint: 'Call addRemoteAgent(metadata) with the metadata fetched over the side channel first.',
  });
}
