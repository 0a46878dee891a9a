/**
 * One engine's end of the p2p tier (docs/connectors/offloading.md#p2p): the control socket
 * peers dial (host:port), the transfer agent that moves the bytes, the staging region, and
 * both roles of vLLM's P2P session protocol.
 *
 * Producer: the chunks of a `remote_decoder` request are parked in staging blocks under its
 * kv_request_id as they are computed. A consumer's `fetch` binds the id; once every named
 * chunk is there (or in the CPU tier), the producer WRITEs them into the consumer's granted
 * staging blocks and answers `transfer_done`. Parked chunks no fetch bound within
 * `unbound_store_timeout_s` are released and the id is remembered as ended, so a late fetch
 * is refused in one round trip. A `lookup` answers which chunks are held.
 *
 * Consumer: `lookup` (peer pulls) asks once per key and answers from the replies; `fetch`
 * grants staging blocks, sends the fetch and waits for `transfer_done` within `timeout_ms`
 * (then aborts). A control connection that closes fails every fetch and lookup on it at once.
 *
 * The scheduler and the worker of one engine share the hub (tensor-parallel size 1: one
 * process), through a registry keyed by the bound address.
 */
import { randomUUID } from 'node:crypto';
import type net from 'node:net';
import { KVError } from '../../errors/index.ts';
import { getLogger } from '../../logging/logger.ts';
import { type AgentMetadata, createTransferAgent, type TransferAgent } from '../../transfer/index.ts';
import { LruMap } from '../../util/lru-map.ts';
import type { P2PConnectMsg, P2PMessage, P2PSource } from '../../wire/index.ts';
import { dialP2P, listenP2P, type P2PConnection } from './p2p-control.ts';
import { P2PStaging } from './p2p-staging.ts';

const log = getLogger('kvconnect.connectors.offloading.p2p-hub');

/** Ended / failed kv_request_ids remembered (a late fetch or lookup is answered at once). */
const IDS_KEPT = 1 << 16;

export interface P2PHubOptions {
  host: string;
  port: number;
  backends: readonly string[];
  numThreads: number;
  unboundStoreTimeoutMs: number;
  /** Consumer's bound on one fetch, one lookup and one connect. */
  timeoutMs: number;
  blockLen: number;
  numBlocks: number;
  fingerprint: string;
  hashSeed: string;
  /** Where config errors point (`kv_connector_extra_config.secondary_tiers[i]`). */
  field: string;
}

interface ServeRequest {
  conn: P2PConnection;
  agentName: string;
  keys: string[];
  indexes: number[];
  writing: boolean;
}

interface Parked {
  blocks: Map<string, { block: number; length: number }>;
  firstAt: number;
  closed: boolean;
  fetch: ServeRequest | null;
}

interface Outbound {
  conn: P2PConnection;
  agentName: string;
  fetches: Map<string, (ok: boolean) => void>;
}

interface LookupState {
  peerId: string;
  answers: Map<string, boolean>;
  asked: Set<string>;
  deadline: number;
  failed: boolean;
}

const HUBS = new Map<string, { hub: P2PHub; refs: number }>();

/** Staging blocks held by this process's hubs (parked chunks and fetches in flight). */
export function p2pHeldBlocks(): number {
  let n = 0;
  for (const { hub } of HUBS.values()) n += hub.heldBlocks;
  return n;
}

export class P2PHub {
  readonly options: P2PHubOptions;
  readonly localId: string;
  readonly staging: P2PStaging;
  #agent: TransferAgent | null = null;
  #server: net.Server | null = null;
  readonly #ready: Promise<void>;
  readonly #inbound = new Set<P2PConnection>();
  readonly #outbound = new Map<string, Promise<Outbound>>();
  readonly #parked = new Map<string, Parked>();
  readonly #ended = new LruMap<string, true>(IDS_KEPT);
  readonly #lookedUp = new LruMap<string, true>(IDS_KEPT);
  readonly #failed = new LruMap<string, true>(IDS_KEPT);
  readonly #lookups = new Map<string, LookupState>();
  #slotOf: (key: string) => number | null = () => null;
  #readSlot: (slot: number) => Uint8Array | null = () => null;
  readonly #sweep: NodeJS.Timeout;
  #closed = false;

  /** The hub bound to this address in this process (created on first use). */
  static acquire(options: P2PHubOptions): P2PHub {
    const id = `${options.host}:${options.port}`;
    const entry = HUBS.get(id);
    if (entry) {
      entry.refs++;
      return entry.hub;
    }
    const hub = new P2PHub(options);
    HUBS.set(id, { hub, refs: 1 });
    return hub;
  }

  constructor(options: P2PHubOptions) {
    this.options = options;
    this.localId = `${options.host}:${options.port}`;
    this.staging = new P2PStaging(options.blockLen, options.numBlocks);
    this.#ready = this.#start();
    this.#ready.catch(() => {});
    const every = Math.max(50, Math.min(1000, options.unboundStoreTimeoutMs / 4));
    this.#sweep = setInterval(() => this.#reapUnbound(), every);
    this.#sweep.unref();
  }

  /** Resolves once the control socket is bound and the agent runs; rejects with the field to fix. */
  ready(): Promise<void> {
    return this.#ready;
  }

  get heldBlocks(): number {
    return this.staging.used;
  }

  /** The scheduler's CPU index: the slot of a ready chunk. */
  attachIndex(slotOf: (key: string) => number | null): void {
    this.#slotOf = slotOf;
  }

  /** The worker's CPU slots. */
  attachSlots(read: (slot: number) => Uint8Array | null): void {
    this.#readSlot = read;
  }

  async release(): Promise<void> {
    const id = this.localId;
    const entry = HUBS.get(id);
    if (entry && entry.hub === this && --entry.refs > 0) return;
    HUBS.delete(id);
    await this.#close();
  }

  // ---- producer ----

  /**
   * Parks one chunk of a `remote_decoder` request: `fill` writes its bytes into a staging
   * block now. False when the id ended, the chunk is parked already, or staging is full.
   */
  park(kvRequestId: string, key: string, length: number, fill: (into: Uint8Array) => void): boolean {
    if (this.#ended.has(kvRequestId)) return false;
    const entry = this.#entry(kvRequestId);
    if (entry.blocks.has(key)) return false;
    const taken = this.staging.take(1);
    if (!taken) {
      log.warnOnce(
        'P2P %s: staging region full (%d blocks); chunks for remote decoders are not kept, their fetches fail and the decoders recompute',
        this.localId,
        this.staging.numBlocks,
      );
      return false;
    }
    const block = taken[0] as number;
    fill(this.staging.view(block, length));
    entry.blocks.set(key, { block, length });
    this.#tryServe(kvRequestId);
    return true;
  }

  /** The producer request finished: no more chunks come for this id. */
  closeParking(kvRequestId: string): void {
    if (this.#ended.has(kvRequestId)) return;
    this.#entry(kvRequestId).closed = true;
    this.#tryServe(kvRequestId);
  }

  #entry(kvRequestId: string): Parked {
    let e = this.#parked.get(kvRequestId);
    if (!e) {
      e = { blocks: new Map(), firstAt: Date.now(), closed: false, fetch: null };
      this.#parked.set(kvRequestId, e);
    }
    return e;
  }

  #holds(kvRequestId: string, key: string): boolean {
    return this.#parked.get(kvRequestId)?.blocks.has(key) === true || this.#slotOf(key) !== null;
  }

  #release(kvRequestId: string, ended: boolean): void {
    const e = this.#parked.get(kvRequestId);
    if (e) {
      this.staging.give([...e.blocks.values()].map((b) => b.block));
      this.#parked.delete(kvRequestId);
    }
    if (ended) this.#ended.set(kvRequestId, true);
  }

  #reapUnbound(): void {
    const deadline = Date.now() - this.options.unboundStoreTimeoutMs;
    for (const [id, e] of [...this.#parked]) {
      if (e.fetch !== null || e.firstAt > deadline) continue;
      this.#release(id, true);
      log.warn(
        'P2P %s: unbound store kv_request_id=%s timed out after %ss without a fetch; released %d blocks',
        this.localId,
        id,
        this.options.unboundStoreTimeoutMs / 1000,
        e.blocks.size,
      );
    }
  }

  #onInbound(conn: P2PConnection): void {
    let agentName: string | null = null;
    this.#inbound.add(conn);
    conn.onClose(() => {
      this.#inbound.delete(conn);
      for (const [id, e] of [...this.#parked]) {
        if (e.fetch?.conn === conn) {
          log.warn(
            'P2P %s: consumer %s gone mid-fetch; releasing kv_request_id=%s',
            this.localId,
            conn.peerId,
            id,
          );
          this.#release(id, true);
        }
      }
      if (agentName) this.#agent?.removeRemoteAgent(agentName);
    });
    conn.onMessage = (m) => {
      if (agentName === null) {
        if (m.type !== 'connect') {
          conn.close();
          return;
        }
        agentName = this.#accept(conn, m);
        return;
      }
      this.#onProducerMessage(conn, agentName, m);
    };
  }

  /** The handshake: same block length, run configuration and hash seed, or a reject naming the difference. */
  #accept(conn: P2PConnection, m: P2PConnectMsg): string | null {
    const o = this.options;
    let reason: string | null = null;
    if (m.hash_seed !== o.hashSeed) {
      reason = `hash seed mismatch: this peer's block hashes are seeded with ${o.hashSeed.slice(0, 16)}…, the peer's with ${m.hash_seed.slice(0, 16)}… (set the same PYTHONHASHSEED on every peer)`;
    } else if (m.config_fingerprint !== o.fingerprint) {
      reason = `run configuration mismatch (${m.config_fingerprint} vs ${o.fingerprint}): peers must serve the same model with the same block size, chunk size and KV dtype`;
    } else if (m.block_len !== o.blockLen) {
      reason = `block_len mismatch: ${m.block_len} vs ${o.blockLen}`;
    }
    let agentName: string | null = null;
    if (reason === null) {
      try {
        agentName = (this.#agent as TransferAgent).addRemoteAgent(
          m.agent_metadata as unknown as AgentMetadata,
        );
      } catch (err) {
        reason = `transfer agent refused: ${String(err)}`;
      }
    }
    if (reason !== null || agentName === null) {
      log.warn('P2P %s: rejecting peer %s: %s', this.localId, m.peer_id, reason);
      conn.send({ type: 'connect_reject', peer_id: this.localId, reason: reason ?? 'refused' });
      conn.socket.end();
      return null;
    }
    conn.peerId = m.peer_id;
    conn.send({
      type: 'connect_ack',
      peer_id: this.localId,
      agent_metadata: (this.#agent as TransferAgent).metadata() as unknown as Record<string, unknown>,
    });
    return agentName;
  }

  #onProducerMessage(conn: P2PConnection, agentName: string, m: P2PMessage): void {
    if (m.type === 'lookup') {
      this.#lookedUp.set(m.kv_request_id, true);
      conn.send({
        type: 'lookup_resp',
        kv_request_id: m.kv_request_id,
        block_hashes: m.block_hashes,
        hits: m.block_hashes.map((k) => !this.#ended.has(m.kv_request_id) && this.#holds(m.kv_request_id, k)),
      });
    } else if (m.type === 'fetch') {
      const id = m.kv_request_id;
      if (this.#ended.has(id)) {
        log.warn(
          'P2P %s: fetch for kv_request_id=%s after its blocks were released; refused',
          this.localId,
          id,
        );
        conn.send({ type: 'transfer_done', kv_request_id: id, success: false });
        return;
      }
      const known = this.#parked.has(id);
      const entry = this.#entry(id);
      // A peer pull (looked up first, nothing parked): serve what the CPU tier holds now.
      if (!known && (this.#lookedUp.has(id) || m.block_hashes.length === 0)) entry.closed = true;
      entry.fetch = { conn, agentName, keys: m.block_hashes, indexes: m.block_indexes, writing: false };
      this.#tryServe(id);
    } else if (m.type === 'abort_fetch') {
      const e = this.#parked.get(m.kv_request_id);
      if (e?.fetch?.conn === conn && !e.fetch.writing) this.#release(m.kv_request_id, true);
      conn.send({ type: 'abort_ack', kv_request_id: m.kv_request_id });
    } else if (m.type === 'disconnect') {
      conn.close();
    }
  }

  /** Writes a bound fetch once all its chunks are here; refuses it when the id can get no more. */
  #tryServe(id: string): void {
    const e = this.#parked.get(id);
    const f = e?.fetch;
    if (!e || !f || f.writing) return;
    for (const key of f.keys) {
      if (e.blocks.has(key)) continue;
      const slot = this.#slotOf(key);
      const bytes = slot === null ? null : this.#readSlot(slot);
      if (!bytes) continue;
      const taken = this.staging.take(1);
      if (!taken) break;
      const block = taken[0] as number;
      this.staging.view(block, bytes.byteLength).set(bytes);
      e.blocks.set(key, { block, length: bytes.byteLength });
    }
    const missing = f.keys.filter((k) => !e.blocks.has(k));
    if (missing.length > 0) {
      if (!e.closed) return;
      log.warn(
        'P2P %s: kv_request_id=%s: %d of %d requested blocks are not held; fetch fails',
        this.localId,
        id,
        missing.length,
        f.keys.length,
      );
      f.conn.send({ type: 'transfer_done', kv_request_id: id, success: false });
      this.#release(id, true);
      return;
    }
    f.writing = true;
    void this.#write(id, e, f);
  }

  async #write(id: string, e: Parked, f: ServeRequest): Promise<void> {
    let ok = f.keys.length === 0;
    if (!ok) {
      const agent = this.#agent as TransferAgent;
      try {
        const handle = agent.write(f.agentName, [
          {
            localRegion: 0,
            localBlockIds: f.keys.map((k) => (e.blocks.get(k) as { block: number }).block),
            remoteRegion: 0,
            remoteBlockIds: f.indexes,
          },
        ]);
        const status = await agent.waitFor(handle);
        agent.releaseHandle(handle);
        ok = status.state === 'DONE';
        if (!ok)
          log.warn(
            'P2P %s: WRITE of kv_request_id=%s failed: %s',
            this.localId,
            id,
            status.reason ?? status.cause,
          );
      } catch (err) {
        log.warn('P2P %s: WRITE of kv_request_id=%s refused: %s', this.localId, id, String(err));
      }
    }
    f.conn.send({ type: 'transfer_done', kv_request_id: id, success: ok });
    if (this.#parked.get(id) === e) this.#release(id, true);
  }

  // ---- consumer ----

  /**
   * Whether `source` holds each key: true / false, or undefined while the answer is on its
   * way (the first call sends one lookup for the keys it has not asked about).
   */
  lookup(source: P2PSource, keys: readonly string[]): (boolean | undefined)[] {
    const id = source.kvRequestId;
    if (this.#failed.has(id)) return keys.map(() => false);
    let st = this.#lookups.get(id);
    if (!st) {
      st = {
        peerId: `${source.host}:${source.port}`,
        answers: new Map(),
        asked: new Set(),
        deadline: Date.now() + this.options.timeoutMs,
        failed: false,
      };
      this.#lookups.set(id, st);
    }
    const state = st;
    if (state.failed || Date.now() > state.deadline) return keys.map((k) => state.answers.get(k) ?? false);
    const ask = keys.filter((k) => !state.answers.has(k) && !state.asked.has(k));
    if (ask.length > 0) {
      for (const k of ask) state.asked.add(k);
      void this.#session(source)
        .then((s) => {
          if (!s.conn.send({ type: 'lookup', kv_request_id: id, block_hashes: ask })) state.failed = true;
        })
        .catch(() => {
          state.failed = true;
        });
    }
    return keys.map((k) => state.answers.get(k));
  }

  /** Whether a fetch or lookup of this consumer transaction failed (its prefix is computed locally). */
  hasFailed(kvRequestId: string): boolean {
    return this.#failed.has(kvRequestId);
  }

  /** The consumer request is finished: drop its lookup answers. */
  forgetRequest(kvRequestId: string): void {
    this.#lookups.delete(kvRequestId);
  }

  /** Pulls the keys from `source`: each chunk's bytes (`lengths[i]` long), or null for all on failure. */
  async fetch(
    source: P2PSource,
    keys: readonly string[],
    lengths: readonly number[],
  ): Promise<(Uint8Array | null)[]> {
    const id = source.kvRequestId;
    const none = keys.map(() => null);
    if (this.#failed.has(id)) return none;
    let session: Outbound;
    try {
      session = await this.#session(source);
    } catch (err) {
      log.warn(
        'P2P %s: cannot reach p2p peer %s:%d (%s); recomputing kv_request_id=%s',
        this.localId,
        source.host,
        source.port,
        String(err),
        id,
      );
      this.#failed.set(id, true);
      return none;
    }
    const blocks = this.staging.take(keys.length);
    if (!blocks) {
      log.warn('P2P %s: staging region full; kv_request_id=%s is recomputed', this.localId, id);
      return none;
    }
    const agent = this.#agent as TransferAgent;
    const grant = `p2p:${id}`;
    agent.grantWrite(grant, {
      peer: session.agentName,
      blockIds: blocks,
      expiresAt: Date.now() + this.options.timeoutMs + 5000,
    });
    await agent.settled();
    let timer: NodeJS.Timeout | undefined;
    const ok = await new Promise<boolean>((resolve) => {
      session.fetches.set(id, resolve);
      timer = setTimeout(() => {
        log.warn(
          'P2P %s: fetch kv_request_id=%s from %s timed out after %d ms; aborting',
          this.localId,
          id,
          session.conn.peerId,
          this.options.timeoutMs,
        );
        session.conn.send({ type: 'abort_fetch', kv_request_id: id });
        resolve(false);
      }, this.options.timeoutMs);
      if (
        !session.conn.send({
          type: 'fetch',
          kv_request_id: id,
          block_hashes: [...keys],
          block_indexes: blocks,
        })
      )
        resolve(false);
    });
    clearTimeout(timer);
    session.fetches.delete(id);
    agent.revokeGrant(grant);
    const values = ok
      ? keys.map((_, i) => Buffer.from(this.staging.view(blocks[i] as number, lengths[i])))
      : none;
    this.staging.give(blocks);
    if (!ok) this.#failed.set(id, true);
    return values;
  }

  #session(source: P2PSource): Promise<Outbound> {
    const peerId = `${source.host}:${source.port}`;
    let p = this.#outbound.get(peerId);
    if (!p) {
      p = this.#connect(source.host, source.port);
      this.#outbound.set(peerId, p);
      p.catch(() => {
        if (this.#outbound.get(peerId) === p) this.#outbound.delete(peerId);
      });
    }
    return p;
  }

  async #connect(host: string, port: number): Promise<Outbound> {
    await this.#ready;
    const agent = this.#agent as TransferAgent;
    const conn = await dialP2P(host, port, this.options.timeoutMs);
    const peerId = `${host}:${port}`;
    const out: Outbound = { conn, agentName: '', fetches: new Map() };
    const acked = new Promise<Outbound>((resolve, reject) => {
      conn.onClose(() => reject(new Error('connection closed during the handshake')));
      conn.onMessage = (m) => {
        if (m.type === 'connect_ack') {
          try {
            out.agentName = agent.addRemoteAgent(m.agent_metadata as unknown as AgentMetadata);
          } catch (err) {
            conn.close();
            reject(err as Error);
            return;
          }
          conn.onMessage = (msg) => this.#onConsumerMessage(peerId, out, msg);
          resolve(out);
        } else if (m.type === 'connect_reject') {
          log.warn('P2P %s: peer %s rejected the handshake: %s', this.localId, peerId, m.reason);
          reject(new Error(`rejected: ${m.reason}`));
          conn.close();
        }
      };
    });
    conn.onClose(() => {
      if (this.#outbound.get(peerId) !== undefined) this.#outbound.delete(peerId);
      if (out.fetches.size > 0)
        log.warn('P2P %s: peer %s gone; failing %d fetches', this.localId, peerId, out.fetches.size);
      for (const resolve of out.fetches.values()) resolve(false);
      for (const st of this.#lookups.values()) if (st.peerId === peerId) st.failed = true;
      if (out.agentName) agent.removeRemoteAgent(out.agentName);
    });
    conn.send({
      type: 'connect',
      peer_id: this.localId,
      agent_metadata: agent.metadata() as unknown as Record<string, unknown>,
      block_len: this.options.blockLen,
      num_blocks: this.options.numBlocks,
      config_fingerprint: this.options.fingerprint,
      hash_seed: this.options.hashSeed,
    });
    return acked;
  }

  #onConsumerMessage(peerId: string, out: Outbound, m: P2PMessage): void {
    if (m.type === 'lookup_resp') {
      const st = this.#lookups.get(m.kv_request_id);
      if (!st || st.peerId !== peerId) return;
      m.block_hashes.forEach((k, i) => {
        st.answers.set(k, m.hits[i] === true);
      });
    } else if (m.type === 'transfer_done') {
      out.fetches.get(m.kv_request_id)?.(m.success);
    } else if (m.type === 'disconnect') {
      out.conn.close();
    }
  }

  // ---- lifecycle ----

  async #start(): Promise<void> {
    const o = this.options;
    try {
      this.#server = await listenP2P(o.host, o.port, (conn) => this.#onInbound(conn));
    } catch (err) {
      this.#closed = true;
      clearInterval(this.#sweep);
      throw new KVError(
        'KV_OFFLOAD_TIER_UNREACHABLE',
        `p2p tier cannot bind its control socket ${o.host}:${o.port}: ${String(err)}`,
        {
          field: `${o.field}.port`,
          hint: 'Give each engine on a host its own base port (the tier\'s "port" or VLLM_P2P_SIDE_CHANNEL_PORT; the data-parallel rank is added), and a "host" this machine owns.',
        },
      );
    }
    this.#agent = await createTransferAgent({
      engineId: `p2p-${randomUUID()}`,
      host: o.host,
      backends: o.backends,
      copyThreads: o.numThreads,
      offerKvMapping: false,
    });
    this.#agent.registerMemory([
      { id: 0, bytes: this.staging.bytes, blockBytes: o.blockLen, numBlocks: o.numBlocks },
    ]);
    if (this.#closed) await this.#close();
  }

  async #close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#sweep);
    for (const conn of this.#inbound) conn.close();
    for (const p of this.#outbound.values()) {
      void p.then(
        (s) => {
          s.conn.send({ type: 'disconnect' });
          s.conn.close();
        },
        () => {},
      );
    }
    this.#outbound.clear();
    for (const id of [...this.#parked.keys()]) this.#release(id, true);
    await new Promise<void>((r) => (this.#server ? this.#server.close(() => r()) : r()));
    this.#server = null;
    await this.#agent?.close();
    this.#agent = null;
  }
}
