/**
 * InThreadTransferAgent: the NIXL-like agent of one engine worker, on the caller's event
 * loop. It owns a listener for peers, the registered regions, the grants that say which
 * peer may touch which blocks, and one outbound connection per remote agent over the
 * transport chosen for it (tcp or shm).
 */
import { createServer, type Server, type Socket } from 'node:net';
import { KVError } from '../errors/index.ts';
import { readEnv } from '../util/envs.ts';
import {
  checkAgentOptions,
  checkProtocol,
  checkRegions,
  closedError,
  DONE_STATUS,
  errStatus,
  PROC_STATUS,
  resolveBusyPollUs,
  resolveCopyThreads,
  unknownHandle,
  unreachable,
} from './agent-checks.ts';
import type { AgentCore } from './agent-core.ts';
import type { AgentObserver, AgentSeams, TransferAgentOptions } from './agent-options.ts';
import { resolveSecret } from './auth.ts';
import { type BackendChoice, chooseTransport, resolveBackends } from './backends.ts';
import { IncomingRuns } from './block-io.ts';
import { BlockRecords } from './block-records.ts';
import { BusyPoll } from './busy-poll.ts';
import { adoptAcceptedSocket, zeroCopyRead } from './connection.ts';
import { prepareDescriptors } from './descriptors.ts';
import { type GrantKind, type GrantSpec, GrantTable } from './grants.ts';
import { defaultShmDir, localHostId } from './host-id.ts';
import { InboundSession } from './inbound.ts';
import { LeaseTable } from './lease-table.ts';
import { TRANSFER_PROTOCOL_VERSION } from './messages.ts';
import { OutboundPeer, type OutboundTransfer } from './outbound.ts';
import { TransferStats, type TransferStatsSnapshot } from './stats.ts';
import type { Descriptors, PostOptions, TransferAgent } from './transfer-agent.ts';
import type {
  AgentMetadata,
  MemoryRegion,
  Notification,
  TransferHandle,
  TransferStatus,
  TransportName,
} from './types.ts';

interface Tracked {
  readonly transfer: OutboundTransfer;
  readonly peer: OutboundPeer;
}

/** A transfer's status; one past its deadline expires now. */
function statusOf(tracked: Tracked): TransferStatus {
  const t = tracked.transfer;
  if (t.state === 'PROC' && performance.now() > t.deadline) tracked.peer.expire(t);
  if (t.state === 'DONE') return DONE_STATUS;
  if (t.state === 'PROC') return PROC_STATUS;
  return errStatus(t.failed, t.failure!);
}

export class InThreadTransferAgent implements TransferAgent {
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
  #leases: LeaseTable | null = null;
  readonly #records: BlockRecords;
  readonly #remotes = new Map<string, AgentMetadata>();
  readonly #peers = new Map<string, OutboundPeer>();
  readonly #transfers = new Map<number, Tracked>();
  readonly #sockets = new Set<Socket>();
  readonly #notifications: Notification[] = [];
  readonly #waiters = new Map<number, (() => void)[]>();
  readonly #stats = new TransferStats();
  #observer: AgentObserver = {};
  #notificationListener: (() => void) | null = null;
  #nextId = 1;
  #port = 0;
  #closed = false;
  readonly #busyPoll: BusyPoll;

  private constructor(opts: TransferAgentOptions, seams: AgentSeams) {
    this.#opts = opts;
    this.engineId = opts.engineId;
    this.tpRank = opts.tpRank ?? 0;
    this.name = opts.agentName ?? `${opts.engineId}-rank${this.tpRank}`;
    this.#backends = resolveBackends(opts.backends);
    const shmDir = opts.shmDir ?? defaultShmDir();
    this.#hostId = localHostId(shmDir);
    checkAgentOptions(opts);
    const copyThreads = resolveCopyThreads(opts.copyThreads);
    this.#busyPoll = new BusyPoll(resolveBusyPollUs(opts.busyPollUs));
    this.#records = new BlockRecords(this.#regions, copyThreads);
    const chunkBytes = opts.chunkBytes ?? 4 << 20;
    this.#grants = new GrantTable(
      {
        ...(opts.grantWaitMs === undefined ? {} : { waitMs: opts.grantWaitMs }),
        ...(opts.maxWaitingReadsPerPeer === undefined ? {} : { maxPerPeer: opts.maxWaitingReadsPerPeer }),
      },
      (count) => this.#observer.waitingReads?.(count),
    );
    this.#grants.onEnd((kind, key) => {
      if (kind === 'read') this.#leases?.withdraw(key);
    });
    this.#core = {
      agentName: this.name,
      engineId: this.engineId,
      secret: resolveSecret(opts.secret),
      shmDir,
      ringBytes: opts.ringBytes ?? 64 << 20,
      chunkBytes,
      handshakeTimeoutMs: opts.connectTimeoutMs ?? 5000,
      offerKv: opts.offerKvMapping ?? true,
      regions: this.#regions,
      grants: this.#grants,
      leases: () => this.#leases,
      records: this.#records,
      offerLeases: (opts.offerKvMapping ?? true) && !readEnv('KVCONNECT_DISABLE_DIRECT_READ'),
      outgoing: seams.outgoing,
      copyThreads,
      activity: this.#busyPoll.touch,
      deliver: (n) => {
        this.#notifications.push(n);
        this.#observer.notification?.(n);
        this.#notificationListener?.();
      },
      grantMissed: () => this.#observer.grantMissed?.() ?? false,
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

  /**
   * Creates the agent and binds its listener (the bound port is what metadata advertises).
   * `seams.outgoing` is for fault injection only (AgentSeams).
   */
  static async create(opts: TransferAgentOptions, seams: AgentSeams = {}): Promise<InThreadTransferAgent> {
    const agent = new InThreadTransferAgent(opts, seams);
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
    checkRegions(regions);
    this.#records.dropRegions(regions.map((r) => r.id));
    for (const r of regions) this.#regions.set(r.id, r);
    // Grants published in a replaced table are withdrawn; grants made before are served the
    // request way (their blocks are hashed when sent).
    this.#leases?.clear();
    this.#leases = new LeaseTable([...this.#regions.values()], this.#records);
  }

  /** Lets the agent thread hear of notifications and waiting READs as they happen. */
  observe(observer: AgentObserver): void {
    this.#observer = observer;
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
    checkProtocol(meta);
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

  get copyThreads(): number {
    return this.#core.copyThreads;
  }

  get busyPollUs(): number {
    return this.#busyPoll.windowUs;
  }

  transportFor(name: string): TransportName {
    const meta = this.#remotes.get(name);
    if (!meta) throw unreachable(name);
    return chooseTransport(this.#backends, this.#hostId, meta);
  }

  read(remoteAgent: string, descs: Descriptors, options: PostOptions = {}): TransferHandle {
    return this.#post('READ', remoteAgent, descs, options);
  }

  write(
    remoteAgent: string,
    descs: Descriptors,
    options: Omit<PostOptions, 'grantKey'> = {},
  ): TransferHandle {
    return this.#post('WRITE', remoteAgent, descs, options);
  }

  #post(
    kind: 'READ' | 'WRITE',
    remoteAgent: string,
    input: Descriptors,
    options: PostOptions,
  ): TransferHandle {
    const started = performance.now();
    if (this.#closed) throw closedError();
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
      heldSeconds: 0,
      setupSeconds: 0,
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
      const wire = Math.max(0, duration - t.heldSeconds - t.setupSeconds);
      this.#stats.recordSuccess(duration, wire, t.postSeconds, t.bytes, t.descs.length);
      if (t.pulled) this.#stats.recordPulledWrite();
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
    if (!tracked) throw unknownHandle(handle.id);
    return statusOf(tracked);
  }

  releaseHandle(handle: TransferHandle): void {
    this.#transfers.delete(handle.id);
  }

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
        // From the transfer itself: a poller may have released the handle since it settled.
        resolve(statusOf(tracked));
      });
    });
  }

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

  onNotification(listener: (() => void) | null): void {
    this.#notificationListener = listener;
  }

  grantRead(key: string, spec: GrantSpec): void {
    this.#grant('read', key, spec);
  }

  grantWrite(key: string, spec: GrantSpec): void {
    this.#grant('write', key, spec);
  }

  #grant(kind: GrantKind, key: string, spec: GrantSpec): void {
    const blockIds = [...spec.blockIds];
    this.#grants.add(kind, key, { ...spec, blockIds });
    // A READ grant is a lease: its blocks stay as they are until it ends, so each block's
    // checksum is computed once, now (lease-table.ts).
    if (kind === 'read' && spec.regions === undefined)
      this.#leases?.publish(key, blockIds, spec.peer ?? '*', spec.expiresAt ?? Number.POSITIVE_INFINITY);
  }

  get waitingReads(): number {
    return this.#grants.waiting;
  }

  recordBlocks(blockIds: Iterable<number>, regions?: Iterable<number>): void {
    this.#records.record(blockIds, regions);
  }

  forgetBlocks(blockIds: Iterable<number>): void {
    this.#records.forget(blockIds);
  }

  /** A READ naming the key afterwards (or waiting for it) is refused at once. */
  revokeGrant(key: string): boolean {
    const r = this.#grants.revoke('read', key);
    const w = this.#grants.revoke('write', key);
    return r || w;
  }

  renewGrant(key: string, expiresAt: number): boolean {
    const r = this.#grants.renew('read', key, expiresAt);
    if (r) this.#leases?.renew(key, expiresAt);
    const w = this.#grants.renew('write', key, expiresAt);
    return r || w;
  }

  settled(): Promise<void> {
    return Promise.resolve();
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
    this.#busyPoll.stop();
    for (const p of this.#peers.values()) p.close('agent closed', 'closed');
    this.#peers.clear();
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

function advertised(host: string): string {
  return host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
}
