/**
 * An emulated link between transfer agents (`kvconnect serve --kv-link`, docs/emulation.md):
 * every READ and WRITE runs for real, then its completion is held until a link of the given
 * bandwidth and setup latency would have finished it — latency + bytes / bandwidth after it
 * was posted, divided by the emulation's speedup. A transfer slower than that is not held.
 * Everything else passes through to the real agent; takeLinkStats() counts the transfers and
 * how long their completions were held.
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
  /** Transfers posted over the link, their bytes and the modelled link time of them (ms). */
  transfers: number;
  bytes: number;
  linkMs: number;
  /**
   * Transfers whose real completion came before the link's and was held, and the time they
   * were held past it (emulated ms: real ms × speedup).
   */
  heldTransfers: number;
  heldMs: number;
}

const noLinkStats = (): LinkStats => ({ transfers: 0, bytes: 0, linkMs: 0, heldTransfers: 0, heldMs: 0 });

/** Modelled link time of `bytes`, ms. */
export function linkMs(link: EmulatedLinkSpec, bytes: number): number {
  return link.latencyUs / 1e3 + bytes / (link.bandwidthGBs * 1e6);
}

/**
 * A connector's stats payload for the link's counts (under `kv_link` in its stats; the server
 * turns them into the kvconnect:kv_link_* counters), or null when there is nothing to report.
 */
export function linkStatsData(s: LinkStats | null): Record<string, number> | null {
  if (!s || (s.transfers === 0 && s.heldTransfers === 0)) return null;
  return {
    transfers: s.transfers,
    bytes: s.bytes,
    link_seconds: s.linkMs / 1e3,
    held_transfers: s.heldTransfers,
    held_seconds: s.heldMs / 1e3,
  };
}

/** The counts of `agent`'s emulated link since the last call; null when it has none. */
export function takeLinkStats(agent: TransferAgent): LinkStats | null {
  return agent instanceof EmulatedLinkAgent ? agent.takeLinkStats() : null;
}

/** `inner` behind the emulated link. */
export class EmulatedLinkAgent implements TransferAgent {
  readonly #inner: TransferAgent;
  readonly #link: EmulatedLinkSpec;
  readonly #blockBytes = new Map<number, number>();
  /** Handle id → performance.now() before which a DONE transfer still reads as PROC. */
  readonly #due = new Map<number, number>();
  /** Handles whose real completion was already counted. */
  readonly #seenDone = new Set<number>();
  #stats: LinkStats = noLinkStats();

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
    if (s.state !== 'DONE' || until === undefined) return s;
    const now = performance.now();
    this.#noteDone(handle.id, until, now);
    if (now >= until) return s;
    return { ...s, state: 'PROC' };
  }

  async waitFor(handle: TransferHandle): Promise<TransferStatus> {
    const s = await this.#inner.waitFor(handle);
    const until = this.#due.get(handle.id);
    if (s.state === 'DONE' && until !== undefined) {
      const now = performance.now();
      this.#noteDone(handle.id, until, now);
      if (until > now) await sleep(until - now);
    }
    return s;
  }

  releaseHandle(handle: TransferHandle): void {
    this.#due.delete(handle.id);
    this.#seenDone.delete(handle.id);
    this.#inner.releaseHandle(handle);
  }

  /** The link's counts since the last call. */
  takeLinkStats(): LinkStats {
    const stats = this.#stats;
    this.#stats = noLinkStats();
    return stats;
  }

  /** The first time a transfer is seen done: it is held for what is left of the link's time. */
  #noteDone(id: number, until: number, now: number): void {
    if (this.#seenDone.has(id)) return;
    this.#seenDone.add(id);
    if (until <= now) return;
    this.#stats.heldTransfers++;
    this.#stats.heldMs += (until - now) * (this.#link.speedup ?? 1);
  }

  #post(handle: TransferHandle, descs: Descriptors): TransferHandle {
    let bytes = 0;
    for (const d of descs) {
      const count = 'count' in d ? d.count : d.localBlockIds.length;
      bytes += count * (this.#blockBytes.get(d.localRegion) ?? 0);
    }
    const ms = linkMs(this.#link, bytes);
    this.#stats.transfers++;
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
  onNotification(listener: (() => void) | null): void {
    this.#inner.onNotification(listener);
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
