/**
 * TransferAgent: the NIXL-like agent of one engine worker. It owns a listener for peers,
 * the registered regions, the grants that say which peer may touch which blocks, and one
 * outbound connection per remote agent over the transport chosen for it (tcp or shm).
 */
import { createServer, type Server, type Socket } from 'node:net';
import { KVError } from '../errors/index.ts';
import type { AgentCore } from './agent-core.ts';
import { resolveSecret } from './auth.ts';
import { type BackendChoice, chooseTransport, resolveBackends } from './backends.ts';
import type { OutgoingHook } from './block-io.ts';
import { IncomingRuns } from './block-io.ts';
import { adoptAcceptedSocket, zeroCopyRead } from './connection.ts';
import { prepareDescriptors } from './descriptors.ts';
import { MAX_PAYLOAD_BYTES } from './framing.ts';
import { type GrantKind, type GrantSpec, GrantTable, isNotYetGrantedRefusal } from './grants.ts';
import { defaultShmDir, localHostId } from './host-id.ts';
import { InboundSession } from './inbound.ts';
import { OutboundPeer, type OutboundTransfer, unreachable } from './outbound.ts';
import { TransferStats, type TransferStatsSnapshot } from './stats.ts';
import type {
  AgentMetadata,
  BlockListPair,
  DescPair,
  MemoryRegion,
  Notification,
  TransferHandle,
  TransferStatus,
} from './types.ts';

export const TRANSFER_PROTOCOL_VERSION = 2;

export interface TransferAgentOptions {
  readonly engineId: string;
  /** Default: `${engineId}-rank${tpRank}`. */
  readonly agentName?: string;
  readonly tpRank?: number;
  /** Published in metadata for the caller's handshake check (see checkCompatibility). */
  readonly compatHash?: string;
  /** Listen address for peers (default 127.0.0.1) and port (default 0 = any free port). */
  readonly host?: string;
  readonly port?: number;
  /** Host published in metadata (default: host, or 127.0.0.1 when host is 0.0.0.0/::). */
  readonly advertiseHost?: string;
  /** vLLM backend names: 'UCX' (auto, default), 'TCP', 'SHM'. */
  readonly backends?: readonly string[];
  /** Shared secret; default from env KVCONNECT_TRANSFER_SECRET; none = no authentication. */
  readonly secret?: string;
  readonly shmDir?: string;
  /** Size of each shm staging ring (sparse file). Default 64 MiB. */
  readonly ringBytes?: number;
  /** Largest data frame / ring chunk. Default 4 MiB. */
  readonly chunkBytes?: number;
  readonly transferTimeoutMs?: number;
  readonly connectTimeoutMs?: number;
  /**
   * How long a peer's READ naming a grant this agent has not created yet waits for it
   * before being refused (0 = refuse at once). Default 5000 ms.
   */
  readonly grantWaitMs?: number;
  /** READs one peer may have waiting for grants at once. Default 256. */
  readonly maxWaitingReadsPerPeer?: number;
  /** Test-only hooks. */
  readonly testHooks?: { readonly outgoing?: OutgoingHook };
}

export interface PostOptions {
  /** Delivered to the remote agent once the transfer completed successfully. */
  readonly notification?: string;
  /** READ only: the grant of the remote owner that covers the blocks. */
  readonly grantKey?: string;
}

interface Tracked {
  readonly transfer: OutboundTransfer;
  readonly peer: OutboundPeer;
}

export class TransferAgent {
  readonly name: string;
  readonly engineId: string;
  readonly tpRank: number;
  readonly #core: AgentCore;
  readonly #opts: TransferAgentOptions;
  readonly #server: Server;
  readonly #backends: BackendChoice;
  readonly #hostId: string;
  readonly #regions = new Map<number, MemoryRegion>();
  readonly #grants: GrantTable;
  readonly #remotes = new Map<string, AgentMetadata>();
  readonly #peers = new Map<string, OutboundPeer>();
  readonly #transfers = new Map<number, Tracked>();
  readonly #sockets = new Set<Socket>();
  readonly #notifications: Notification[] = [];
  readonly #waiters = new Map<number, (() => void)[]>();
  readonly #stats = new TransferStats();
  #nextId = 1;
  #port = 0;
  #closed = false;

  /**
   * True when a transfer failed only because the remote owner had not created the named
   * grant yet (it waited and gave up): posting it again may succeed. A grant that was
   * revoked or expired is never retryable.
   */
  static isRetryableRefusal(reason: string | undefined): boolean {
    return reason !== undefined && isNotYetGrantedRefusal(reason);
  }

  private constructor(opts: TransferAgentOptions) {
    this.#opts = opts;
    this.engineId = opts.engineId;
    this.tpRank = opts.tpRank ?? 0;
    this.name = opts.agentName ?? `${opts.engineId}-rank${this.tpRank}`;
    this.#backends = resolveBackends(opts.backends);
    const shmDir = opts.shmDir ?? defaultShmDir();
    this.#hostId = localHostId(shmDir);
    const chunkBytes = opts.chunkBytes ?? 4 << 20;
    if (chunkBytes > MAX_PAYLOAD_BYTES) throw new RangeError(`chunkBytes must be ≤ ${MAX_PAYLOAD_BYTES}`);
    const waitMs = opts.grantWaitMs;
    if (waitMs !== undefined && !(Number.isFinite(waitMs) && waitMs >= 0 && waitMs <= 2 ** 31 - 1)) {
      throw new RangeError(`grantWaitMs must be between 0 and ${2 ** 31 - 1}, got ${waitMs}`);
    }
    this.#grants = new GrantTable({
      ...(opts.grantWaitMs === undefined ? {} : { waitMs: opts.grantWaitMs }),
      ...(opts.maxWaitingReadsPerPeer === undefined ? {} : { maxPerPeer: opts.maxWaitingReadsPerPeer }),
    });
    this.#core = {
      agentName: this.name,
      engineId: this.engineId,
      secret: resolveSecret(opts.secret),
      shmDir,
      ringBytes: opts.ringBytes ?? 64 << 20,
      chunkBytes,
      handshakeTimeoutMs: opts.connectTimeoutMs ?? 5000,
      regions: this.#regions,
      grants: this.#grants,
      outgoingHook: opts.testHooks?.outgoing,
      deliver: (n) => this.#notifications.push(n),
    };
    // Paused on accept so the socket can be re-wrapped to read payloads in place (WRITE data).
    this.#server = createServer({ pauseOnConnect: true }, (accepted) => {
      let session: InboundSession | undefined;
      const socket = adoptAcceptedSocket(
        accepted,
        zeroCopyRead(() => session?.connection),
      );
      this.#sockets.add(socket);
      socket.on('close', () => this.#sockets.delete(socket));
      session = new InboundSession(this.#core, socket);
    });
  }

  /** Creates the agent and binds its listener (the bound port is what metadata advertises). */
  static async create(opts: TransferAgentOptions): Promise<TransferAgent> {
    const agent = new TransferAgent(opts);
    const host = opts.host ?? '127.0.0.1';
    const port = opts.port ?? 0;
    await new Promise<void>((resolve, reject) => {
      agent.#server.once('error', (e: NodeJS.ErrnoException) => {
        if (e.code === 'EADDRINUSE') {
          reject(
            new KVError('TRANSFER_PORT_IN_USE', `transfer agent port ${port} on ${host} is already in use`, {
              hint: 'Pick another port for the transfer agent, or 0 to let the system choose one.',
              cause: e,
            }),
          );
        } else reject(e);
      });
      agent.#server.listen(port, host, () => resolve());
    });
    const addr = agent.#server.address();
    agent.#port = typeof addr === 'object' && addr !== null ? addr.port : port;
    return agent;
  }

  registerMemory(regions: readonly MemoryRegion[]): void {
    for (const r of regions) {
      const ok =
        Number.isSafeInteger(r.id) &&
        Number.isSafeInteger(r.blockBytes) &&
        r.blockBytes > 0 &&
        Number.isSafeInteger(r.numBlocks) &&
        r.numBlocks > 0 &&
        r.bytes.length >= r.blockBytes * r.numBlocks;
      if (!ok) {
        throw new KVError(
          'TRANSFER_BAD_REGION',
          `region ${r.id} is inconsistent: ${r.bytes.length} bytes for ${r.numBlocks} blocks of ${r.blockBytes}`,
          {
            hint: 'A region must hold numBlocks × blockBytes bytes, with positive integer sizes.',
          },
        );
      }
      if (r.blockBytes > MAX_PAYLOAD_BYTES) {
        throw new KVError(
          'TRANSFER_BAD_REGION',
          `block of ${r.blockBytes} bytes exceeds ${MAX_PAYLOAD_BYTES}`,
          {
            hint: 'Use a smaller KV block size.',
          },
        );
      }
      this.#regions.set(r.id, r);
    }
  }

  metadata(): AgentMetadata {
    const host = this.#opts.advertiseHost ?? advertised(this.#opts.host ?? '127.0.0.1');
    return {
      protocolVersion: TRANSFER_PROTOCOL_VERSION,
      agentName: this.name,
      engineId: this.engineId,
      tpRank: this.tpRank,
      compatHash: this.#opts.compatHash ?? '',
      endpoints: {
        tcp: { host, port: this.#port },
        ...(this.#backends.shm ? { shm: { hostId: this.#hostId } } : {}),
      },
      regions: [...this.#regions.values()].map(({ id, blockBytes, numBlocks }) => ({
        id,
        blockBytes,
        numBlocks,
      })),
    };
  }

  /** Registers a peer's metadata; returns its agent name (the handle for read/write). */
  addRemoteAgent(meta: AgentMetadata): string {
    if (meta.protocolVersion !== TRANSFER_PROTOCOL_VERSION) {
      throw new KVError(
        'TRANSFER_PROTOCOL_MISMATCH',
        `remote agent ${meta.agentName} speaks transfer protocol ${meta.protocolVersion}, this agent ${TRANSFER_PROTOCOL_VERSION}`,
        { hint: 'Run the same kvconnect version on both engines.' },
      );
    }
    // The same metadata again (a repeated handshake) keeps the live connection and its transfers.
    if (JSON.stringify(this.#remotes.get(meta.agentName)) === JSON.stringify(meta)) return meta.agentName;
    const old = this.#peers.get(meta.agentName);
    if (old) {
      old.close('remote agent re-added');
      this.#peers.delete(meta.agentName);
    }
    this.#remotes.set(meta.agentName, meta);
    return meta.agentName;
  }

  removeRemoteAgent(name: string): void {
    this.#peers.get(name)?.close('remote agent removed');
    this.#peers.delete(name);
    this.#remotes.delete(name);
  }

  /** Which transport reaches this remote agent (tcp or shm). */
  transportFor(name: string): 'tcp' | 'shm' {
    const meta = this.#remotes.get(name);
    if (!meta) throw unreachable(name);
    return chooseTransport(this.#backends, this.#hostId, meta);
  }

  read(
    remoteAgent: string,
    descs: readonly DescPair[] | readonly BlockListPair[],
    options: PostOptions = {},
  ): TransferHandle {
    return this.#post('READ', remoteAgent, descs, options);
  }

  write(
    remoteAgent: string,
    descs: readonly DescPair[] | readonly BlockListPair[],
    options: Omit<PostOptions, 'grantKey'> = {},
  ): TransferHandle {
    return this.#post('WRITE', remoteAgent, descs, options);
  }

  #post(
    kind: 'READ' | 'WRITE',
    remoteAgent: string,
    input: readonly DescPair[] | readonly BlockListPair[],
    options: PostOptions,
  ): TransferHandle {
    const started = performance.now();
    if (this.#closed)
      throw new KVError('TRANSFER_CLOSED', 'transfer agent is closed', { hint: 'Create a new agent.' });
    const meta = this.#remotes.get(remoteAgent);
    if (!meta) throw unreachable(remoteAgent);
    const descs = prepareDescriptors(kind, input, this.#regions, meta);
    const peer = this.#peerFor(meta);
    let bytes = 0;
    for (const d of descs) bytes += d.count * this.#regions.get(d.localRegion)!.blockBytes;
    const timeout = this.#opts.transferTimeoutMs ?? 30_000;
    const transfer: OutboundTransfer = {
      id: this.#nextId++,
      kind,
      descs,
      bytes,
      notification: options.notification,
      postedAt: started,
      deadline: started + timeout,
      postSeconds: 0,
      incoming: new IncomingRuns(
        descs.map((d) => ({ region: d.localRegion, first: d.localFirst, count: d.count })),
        this.#regions,
      ),
      state: 'PROC',
      failed: [],
    };
    this.#transfers.set(transfer.id, { transfer, peer });
    peer.post(transfer, options.grantKey);
    transfer.postSeconds = (performance.now() - started) / 1000;
    return { id: transfer.id, kind, remoteAgent };
  }

  #peerFor(meta: AgentMetadata): OutboundPeer {
    let peer = this.#peers.get(meta.agentName);
    if (peer && !peer.closed) return peer;
    const transport = chooseTransport(this.#backends, this.#hostId, meta);
    peer = new OutboundPeer(this.#core, meta, transport, this.#opts.connectTimeoutMs ?? 5000, (t) =>
      this.#finished(t),
    );
    this.#peers.set(meta.agentName, peer);
    return peer;
  }

  #finished(t: OutboundTransfer): void {
    const waiters = this.#waiters.get(t.id);
    this.#waiters.delete(t.id);
    if (t.state === 'DONE') {
      const duration = ((t.finishedAt ?? performance.now()) - t.postedAt) / 1000;
      this.#stats.recordSuccess(duration, t.postSeconds, t.bytes, t.descs.length);
    } else {
      this.#stats.recordFailedTransfer();
    }
    if (waiters) {
      queueMicrotask(() => {
        for (const w of waiters) w();
      });
    }
  }

  status(handle: TransferHandle): TransferStatus {
    const tracked = this.#transfers.get(handle.id);
    if (!tracked) {
      throw new KVError(
        'TRANSFER_UNKNOWN_HANDLE',
        `transfer handle ${handle.id} is unknown or was released`,
        {
          hint: 'Poll only handles returned by read()/write() and not yet released.',
        },
      );
    }
    const t = tracked.transfer;
    if (t.state === 'PROC' && performance.now() > t.deadline) tracked.peer.expire(t);
    if (t.state !== 'ERR') return { state: t.state, failed: [], failedBlockIds: [] };
    const ids = [...new Set(t.failed.flatMap((f) => f.blockIds))].sort((a, b) => a - b);
    return { state: 'ERR', failed: t.failed, failedBlockIds: ids, reason: t.reason ?? 'transfer failed' };
  }

  /** Forgets a finished transfer (NIXL's release_xfer_handle). */
  releaseHandle(handle: TransferHandle): void {
    this.#transfers.delete(handle.id);
  }

  /** Resolves when the transfer leaves PROC (DONE or ERR, including its deadline passing). */
  waitFor(handle: TransferHandle): Promise<TransferStatus> {
    const first = this.status(handle);
    const tracked = this.#transfers.get(handle.id)!;
    if (first.state !== 'PROC') return Promise.resolve(first);
    return new Promise((resolve) => {
      const timer = setTimeout(
        () => tracked.peer.expire(tracked.transfer),
        tracked.transfer.deadline - performance.now() + 1,
      );
      let list = this.#waiters.get(handle.id);
      if (!list) {
        list = [];
        this.#waiters.set(handle.id, list);
      }
      list.push(() => {
        clearTimeout(timer);
        resolve(this.status(handle));
      });
    });
  }

  /** Sends a notification; resolves when written, rejects (and counts a failure) if unreachable. */
  async sendNotification(remoteAgent: string, message: string): Promise<void> {
    const meta = this.#remotes.get(remoteAgent);
    try {
      if (!meta) throw unreachable(remoteAgent);
      const peer = this.#peerFor(meta);
      await peer.ready();
      await peer.notify(message);
    } catch (e) {
      this.#stats.recordFailedNotification();
      throw e instanceof KVError
        ? e
        : new KVError('TRANSFER_NOTIFICATION_FAILED', `notification to ${remoteAgent} failed: ${String(e)}`, {
            hint: 'The peer is unreachable; it will release its blocks when their lease expires.',
            cause: e,
          });
    }
  }

  drainNotifications(): Notification[] {
    return this.#notifications.splice(0);
  }

  grantRead(key: string, spec: GrantSpec): void {
    this.#grant('read', key, spec);
  }

  grantWrite(key: string, spec: GrantSpec): void {
    this.#grant('write', key, spec);
  }

  #grant(kind: GrantKind, key: string, spec: GrantSpec): void {
    this.#grants.add(kind, key, spec);
  }

  /** READs of peers currently waiting for a grant of this agent to appear. */
  get waitingReads(): number {
    return this.#grants.waiting;
  }

  /**
   * Revokes the read and write grants named `key`; true if one existed. A READ naming the
   * key afterwards (or waiting for it) is refused at once.
   */
  revokeGrant(key: string): boolean {
    const r = this.#grants.revoke('read', key);
    const w = this.#grants.revoke('write', key);
    return r || w;
  }

  /** Extends (or shortens) a lease; true if a grant with this key exists. */
  renewGrant(key: string, expiresAt: number): boolean {
    const r = this.#grants.renew('read', key, expiresAt);
    const w = this.#grants.renew('write', key, expiresAt);
    return r || w;
  }

  getStats(): TransferStatsSnapshot {
    return this.#stats.snapshot();
  }

  resetStats(): TransferStatsSnapshot {
    return this.#stats.reset();
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const p of this.#peers.values()) p.close('agent closed');
    this.#peers.clear();
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

function advertised(host: string): string {
  return host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
}
