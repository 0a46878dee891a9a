/**
 * An emulated link between transfer agents (`kvconnect serve --kv-link`, docs/emulation.md):
 * every READ and WRITE runs for real, then its completion is held until a link of the given
 * bandwidth and setup latency would have finished it — latency + bytes / bandwidth after it
 * was posted, divided by the emulation's speedup. A transfer slower than that is not held.
 * Everything else passes through to the real agent; the holds are counted in linkStats().
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { GrantSpec } from './grants.ts';
import type { TransferStatsSnapshot } from './stats.ts';
import type { Descriptors, PostOptions, TransferAgent } from './transfer-agent.ts';
import type {
  AgentMetadata,
  MemoryRegion,
  Notification,
  TransferHandle,
  TransferStatus,
  TransportName,
} from './types.ts';

export interface EmulatedLinkSpec {
  /** GB/s (10^9 bytes per second). */
  readonly bandwidthGBs: number;
  readonly latencyUs: number;
  /** Emulated time runs this many times faster than the wall clock (default 1). */
  readonly speedup?: number;
}

export interface LinkStats {
  heldTransfers: number;
  /** Bytes the held transfers moved, and the modelled link time they were held to (ms). */
  bytes: number;
  linkMs: number;
}

/** Modelled link time of `bytes`, ms. */
export function linkMs(link: EmulatedLinkSpec, bytes: number): number {
  return link.latencyUs / 1e3 + bytes / (link.bandwidthGBs * 1e6);
}

/** `inner` behind the emulated link. */
export class EmulatedLinkAgent implements TransferAgent {
  readonly #inner: TransferAgent;
  readonly #link: EmulatedLinkSpec;
  readonly #blockBytes = new Map<number, number>();
  /** Handle id → performance.now() before which a DONE transfer still reads as PROC. */
  readonly #due = new Map<number, number>();
  readonly #stats: LinkStats = { heldTransfers: 0, bytes: 0, linkMs: 0 };

  constructor(inner: TransferAgent, link: EmulatedLinkSpec) {
    this.#inner = inner;
    this.#link = link;
  }

  get name(): string {
    return this.#inner.name;
  }
  get engineId(): string {
    return this.#inner.engineId;
  }
  get tpRank(): number {
    return this.#inner.tpRank;
  }
  get copyThreads(): number {
    return this.#inner.copyThreads;
  }
  get busyPollUs(): number {
    return this.#inner.busyPollUs;
  }
  get waitingReads(): number {
    return this.#inner.waitingReads;
  }

  registerMemory(regions: readonly MemoryRegion[]): void {
    this.#inner.registerMemory(regions);
    for (const r of regions) this.#blockBytes.set(r.id, r.blockBytes);
  }

  read(remoteAgent: string, descs: Descriptors, options?: PostOptions): TransferHandle {
    return this.#post(this.#inner.read(remoteAgent, descs, options), descs);
  }

  write(remoteAgent: string, descs: Descriptors, options?: Omit<PostOptions, 'grantKey'>): TransferHandle {
    return this.#post(this.#inner.write(remoteAgent, descs, options), descs);
  }

  status(handle: TransferHandle): TransferStatus {
    const s = this.#inner.status(handle);
    const until = this.#due.get(handle.id);
    if (s.state !== 'DONE' || until === undefined || performance.now() >= until) return s;
    return { ...s, state: 'PROC' };
  }

  async waitFor(handle: TransferHandle): Promise<TransferStatus> {
    const s = await this.#inner.waitFor(handle);
    const until = this.#due.get(handle.id);
    if (s.state === 'DONE' && until !== undefined) {
      const wait = until - performance.now();
      if (wait > 0) await sleep(wait);
    }
    return s;
  }

  releaseHandle(handle: TransferHandle): void {
    this.#due.delete(handle.id);
    this.#inner.releaseHandle(handle);
  }

  linkStats(): LinkStats {
    return { ...this.#stats };
  }

  #post(handle: TransferHandle, descs: Descriptors): TransferHandle {
    let bytes = 0;
    for (const d of descs) {
      const count = 'count' in d ? d.count : d.localBlockIds.length;
      bytes += count * (this.#blockBytes.get(d.localRegion) ?? 0);
    }
    const ms = linkMs(this.#link, bytes);
    this.#stats.heldTransfers++;
    this.#stats.bytes += bytes;
    this.#stats.linkMs += ms;
    this.#due.set(handle.id, performance.now() + ms / (this.#link.speedup ?? 1));
    return handle;
  }

  metadata(): AgentMetadata {
    return this.#inner.metadata();
  }
  addRemoteAgent(meta: AgentMetadata): string {
    return this.#inner.addRemoteAgent(meta);
  }
  removeRemoteAgent(name: string): void {
    this.#inner.removeRemoteAgent(name);
  }
  transportFor(name: string): TransportName {
    return this.#inner.transportFor(name);
  }
  sendNotification(remoteAgent: string, message: string): Promise<void> {
    return this.#inner.sendNotification(remoteAgent, message);
  }
  drainNotifications(): Notification[] {
    return this.#inner.drainNotifications();
  }
  grantRead(key: string, spec: GrantSpec): void {
    this.#inner.grantRead(key, spec);
  }
  grantWrite(key: string, spec: GrantSpec): void {
    this.#inner.grantWrite(key, spec);
  }
  recordBlocks(blockIds: Iterable<number>, regions?: Iterable<number>): void {
    this.#inner.recordBlocks(blockIds, regions);
  }
  forgetBlocks(blockIds: Iterable<number>): void {
    this.#inner.forgetBlocks(blockIds);
  }
  revokeGrant(key: string): boolean {
    return this.#inner.revokeGrant(key);
  }
  renewGrant(key: string, expiresAt: number): boolean {
    return this.#inner.renewGrant(key, expiresAt);
  }
  settled(): Promise<void> {
    return this.#inner.settled();
  }
  getStats(): TransferStatsSnapshot {
    return this.#inner.getStats();
  }
  resetStats(): TransferStatsSnapshot {
    return this.#inner.resetStats();
  }
  close(): Promise<void> {
    return this.#inner.close();
  }
}
