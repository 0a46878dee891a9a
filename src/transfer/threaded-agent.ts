/**
 * ThreadedTransferAgent: the in-thread agent hosted in a worker thread, so transfers progress
 * (and peers' READs are served) while the main thread is busy computing a model step. The
 * main thread keeps a mirror: posts, grants and notifications go to the worker as ordered
 * messages; completions, inbound notifications and stats come back as messages and update
 * the mirror, so status() and drainNotifications() stay synchronous and return the latest
 * known state. Registered memory must live in SharedArrayBuffers (the worker views it).
 */
import type { Worker } from 'node:worker_threads';
import { KVError } from '../errors/index.ts';
import { stopWorker } from '../util/start-worker.ts';
import {
  checkAgentOptions,
  checkProtocol,
  checkRegions,
  closedError,
  errStatus,
  localBlocks,
  PROC_STATUS,
  resolveBusyPollUs,
  resolveCopyThreads,
  unknownHandle,
  unreachable,
} from './agent-checks.ts';
import type { AgentSeams } from './agent-options.ts';
import type {
  FromAgentThread,
  SharedRegion,
  ThreadedAgentOptions,
  ToAgentThread,
} from './agent-thread-protocol.ts';
import { fromPlainError, startAgentThread, waitReady } from './agent-thread-start.ts';
import { type BackendChoice, chooseTransport, resolveBackends } from './backends.ts';
import { prepareDescriptors } from './descriptors.ts';
import type { TransferFailureCause } from './failure.ts';
import type { GrantSpec } from './grants.ts';
import { TransferStats, type TransferStatsSnapshot } from './stats.ts';
import type { Descriptors, PostOptions, TransferAgent } from './transfer-agent.ts';
import type {
  AgentMetadata,
  DescPair,
  MemoryRegion,
  Notification,
  TransferHandle,
  TransferStatus,
  TransportName,
} from './types.ts';

export type { ThreadedAgentOptions } from './agent-thread-protocol.ts';

interface MirroredTransfer {
  readonly descs: readonly DescPair[];
  status: TransferStatus;
  waiters: ((s: TransferStatus) => void)[];
}

interface PendingNotify {
  resolve(): void;
  reject(e: KVError): void;
}

export class ThreadedTransferAgent implements TransferAgent {
  readonly name: string;
  readonly engineId: string;
  readonly tpRank: number;
  readonly copyThreads: number;
  readonly busyPollUs: number;
  readonly #worker: Worker;
  readonly #backends: BackendChoice;
  readonly #base: AgentMetadata;
  readonly #regions = new Map<number, MemoryRegion>();
  readonly #remotes = new Map<string, AgentMetadata>();
  readonly #transfers = new Map<number, MirroredTransfer>();
  readonly #notifies = new Map<number, PendingNotify>();
  readonly #syncs = new Map<number, () => void>();
  /** Grant keys believed live, with their expiry (epoch ms; Infinity = until revoked). */
  readonly #grants = new Map<string, number>();
  readonly #notifications: Notification[] = [];
  #notificationListener: (() => void) | null = null;
  readonly #stats = new TransferStats();
  #waiting = 0;
  #nextId = 1;
  #failure: KVError | null = null;
  #closed = false;
  #onClosed: (() => void) | null = null;

  private constructor(
    worker: Worker,
    opts: ThreadedAgentOptions,
    base: AgentMetadata,
    copyThreads: number,
    busyPollUs: number,
  ) {
    this.#worker = worker;
    this.#base = base;
    this.name = base.agentName;
    this.engineId = base.engineId;
    this.tpRank = base.tpRank;
    this.copyThreads = copyThreads;
    this.busyPollUs = busyPollUs;
    this.#backends = resolveBackends(opts.backends);
    worker.on('message', (msg: FromAgentThread) => this.#onMessage(msg));
    worker.on('error', (e) => this.#fail(e.message));
    worker.on('exit', (code) => {
      if (!this.#closed) this.#fail(`transfer thread exited with code ${code}`);
      this.#onClosed?.();
    });
  }

  /**
   * Starts the worker, which creates the agent and binds its listener. `seams.threadEntry`
   * is for fault injection only (AgentSeams).
   */
  static async create(
    opts: ThreadedAgentOptions,
    seams: Pick<AgentSeams, 'threadEntry'> = {},
  ): Promise<ThreadedTransferAgent> {
    resolveBackends(opts.backends);
    checkAgentOptions(opts);
    // Resolved here (the error before any thread starts) and handed to the thread as the option.
    const copyThreads = resolveCopyThreads(opts.copyThreads);
    const busyPollUs = resolveBusyPollUs(opts.busyPollUs, true);
    const worker = startAgentThread({ options: { ...opts, copyThreads, busyPollUs } }, seams.threadEntry);
    try {
      const base = await waitReady(worker);
      return new ThreadedTransferAgent(worker, opts, base, copyThreads, busyPollUs);
    } catch (e) {
      await worker.terminate();
      throw e;
    }
  }

  registerMemory(regions: readonly MemoryRegion[]): void {
    this.#usable();
    checkRegions(regions);
    const shared: SharedRegion[] = regions.map((r) => {
      if (!(r.bytes.buffer instanceof SharedArrayBuffer)) {
        throw new KVError(
          'TRANSFER_REGION_NOT_SHARED',
          `region ${r.id} is not backed by a SharedArrayBuffer`,
          {
            hint: 'With transfer_thread enabled, allocate registered memory in a SharedArrayBuffer.',
          },
        );
      }
      return {
        id: r.id,
        buffer: r.bytes.buffer,
        byteOffset: r.bytes.byteOffset,
        byteLength: r.bytes.byteLength,
        blockBytes: r.blockBytes,
        numBlocks: r.numBlocks,
      };
    });
    for (const r of regions) this.#regions.set(r.id, r);
    this.#send({ type: 'register', regions: shared });
  }

  metadata(): AgentMetadata {
    const regions = [...this.#regions.values()].map(({ id, blockBytes, numBlocks }) => ({
      id,
      blockBytes,
      numBlocks,
    }));
    return { ...this.#base, regions };
  }

  addRemoteAgent(meta: AgentMetadata): string {
    this.#usable();
    checkProtocol(meta);
    this.#remotes.set(meta.agentName, meta);
    this.#send({ type: 'add-remote', meta });
    return meta.agentName;
  }

  removeRemoteAgent(name: string): void {
    this.#remotes.delete(name);
    if (!this.#failure && !this.#closed) this.#send({ type: 'remove-remote', name });
  }

  transportFor(name: string): TransportName {
    const meta = this.#remotes.get(name);
    if (!meta) throw unreachable(name);
    return chooseTransport(this.#backends, this.#base.endpoints.shm?.hostId ?? '', meta);
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
    this.#usable();
    const meta = this.#remotes.get(remoteAgent);
    if (!meta) throw unreachable(remoteAgent);
    const descs = prepareDescriptors(kind, input, this.#regions, meta);
    const id = this.#nextId++;
    this.#transfers.set(id, { descs, status: PROC_STATUS, waiters: [] });
    this.#send({
      type: 'post',
      id,
      kind,
      remoteAgent,
      descs,
      ...(options.notification === undefined ? {} : { notification: options.notification }),
      ...(options.grantKey === undefined ? {} : { grantKey: options.grantKey }),
    });
    return { id, kind, remoteAgent };
  }

  status(handle: TransferHandle): TransferStatus {
    const t = this.#transfers.get(handle.id);
    if (!t) throw unknownHandle(handle.id);
    return t.status;
  }

  releaseHandle(handle: TransferHandle): void {
    this.#transfers.delete(handle.id);
  }

  waitFor(handle: TransferHandle): Promise<TransferStatus> {
    const first = this.status(handle);
    if (first.state !== 'PROC') return Promise.resolve(first);
    const t = this.#transfers.get(handle.id)!;
    return new Promise((resolve) => t.waiters.push(resolve));
  }

  sendNotification(remoteAgent: string, message: string): Promise<void> {
    try {
      this.#usable();
      if (!this.#remotes.has(remoteAgent)) throw unreachable(remoteAgent);
    } catch (e) {
      this.#stats.recordFailedNotification();
      return Promise.reject(e);
    }
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#notifies.set(id, { resolve, reject });
      this.#send({ type: 'notify', id, remoteAgent, message });
    });
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

  #grant(kind: 'read' | 'write', key: string, spec: GrantSpec): void {
    this.#usable();
    this.#grants.set(key, spec.expiresAt ?? Number.POSITIVE_INFINITY);
    this.#send({
      type: 'grant',
      kind,
      key,
      spec: {
        blockIds: [...spec.blockIds],
        ...(spec.peer === undefined ? {} : { peer: spec.peer }),
        ...(spec.regions === undefined ? {} : { regions: [...spec.regions] }),
        ...(spec.expiresAt === undefined ? {} : { expiresAt: spec.expiresAt }),
      },
    });
  }

  /**
   * The agent's thread hashes the blocks (off this thread). Messages reach it in order, so a
   * later forgetBlocks, grant or post sees the record, and a record never outlives a later
   * forgetBlocks of its blocks.
   */
  recordBlocks(blockIds: Iterable<number>, regions?: Iterable<number>): void {
    this.#usable();
    this.#send({
      type: 'record',
      blockIds: [...blockIds],
      ...(regions === undefined ? {} : { regions: [...regions] }),
    });
  }

  forgetBlocks(blockIds: Iterable<number>): void {
    this.#usable();
    this.#send({ type: 'forget', blockIds: [...blockIds] });
  }

  /** Peers' READs waiting for a grant of this agent, as last reported by the thread. */
  get waitingReads(): number {
    return this.#waiting;
  }

  revokeGrant(key: string): boolean {
    this.#usable();
    const existed = this.#grants.has(key);
    this.#grants.delete(key);
    this.#send({ type: 'revoke', key });
    return existed;
  }

  renewGrant(key: string, expiresAt: number): boolean {
    this.#usable();
    if (!this.#grants.has(key)) return false;
    this.#grants.set(key, expiresAt);
    this.#send({ type: 'renew', key, expiresAt });
    return true;
  }

  settled(): Promise<void> {
    this.#usable();
    const id = this.#nextId++;
    return new Promise((resolve) => {
      this.#syncs.set(id, resolve);
      this.#send({ type: 'sync', id });
    });
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
    if (this.#failure) {
      await this.#worker.terminate();
      return;
    }
    const exited = new Promise<void>((resolve) => {
      this.#onClosed = resolve;
    });
    const closed = new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, 2000);
      this.#worker.on('message', (m: FromAgentThread) => {
        if (m.type === 'closed') {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    this.#worker.postMessage({ type: 'close' } satisfies ToAgentThread);
    await Promise.race([closed, exited]);
    // After 'closed' the thread closes its port and exits on its own.
    await stopWorker(this.#worker);
    this.#stop(closedError(), 'closed');
  }

  #send(msg: ToAgentThread): void {
    this.#worker.postMessage(msg);
  }

  #usable(): void {
    if (this.#closed && !this.#failure) throw closedError();
    if (this.#failure) throw this.#failure;
  }

  #onMessage(msg: FromAgentThread): void {
    switch (msg.type) {
      case 'done': {
        const t = this.#transfers.get(msg.id);
        if (t?.status.state !== 'PROC') return;
        this.#settle(t, msg.status);
        return;
      }
      case 'notify-result': {
        const p = this.#notifies.get(msg.id);
        this.#notifies.delete(msg.id);
        if (msg.error) p?.reject(fromPlainError(msg.error));
        else p?.resolve();
        return;
      }
      case 'notifications':
        this.#notifications.push(...msg.items);
        this.#notificationListener?.();
        return;
      case 'waiting':
        this.#waiting = msg.count;
        return;
      case 'synced':
        this.#syncs.get(msg.id)?.();
        this.#syncs.delete(msg.id);
        return;
      case 'stats':
        this.#stats.merge(msg.delta);
        return;
      case 'command-error':
        this.#fail(`${msg.what} failed in the transfer thread: ${msg.error.message}`);
        return;
      default:
        return;
    }
  }

  #settle(t: MirroredTransfer, status: TransferStatus): void {
    t.status = status;
    const waiters = t.waiters.splice(0);
    for (const w of waiters) w(status);
  }

  /** The thread failed: every pending transfer and notification fails with the reason. */
  #fail(reason: string): void {
    const error = new KVError('TRANSFER_THREAD_FAILED', `transfer thread failed: ${reason}`, {
      hint: 'The transfer agent thread stopped; restart the engine (or disable transfer_thread) and report the cause.',
    });
    this.#stop(error, 'thread_failed');
  }

  /** The thread is gone (failed, or closed): every pending transfer and notification fails with `error`. */
  #stop(error: KVError, cause: TransferFailureCause): void {
    if (this.#failure) return;
    this.#failure = error;
    for (const t of this.#transfers.values()) {
      if (t.status.state !== 'PROC') continue;
      this.#stats.recordFailedTransfer();
      this.#settle(t, errStatus(localBlocks(t.descs), { cause, reason: error.message }));
    }
    for (const p of this.#notifies.values()) p.reject(this.#failure);
    this.#notifies.clear();
    // Nothing more can take effect: whoever waits for earlier calls may go on.
    for (const resolve of this.#syncs.values()) resolve();
    this.#syncs.clear();
  }
}
