/**
 * The worker half of the OffloadingConnector: owns the CPU tier's bytes and the clients
 * of the secondary tiers. Stores copy GPU blocks into CPU slots synchronously in
 * waitForSave (so a later step may reuse the blocks at once), then write through to the
 * secondary tiers in the background. CPU hits load synchronously in startLoadKv; chunks
 * from a secondary tier load asynchronously, pass through their CPU slot (promotion) and
 * report the request in finished_recving; anything missing or corrupt becomes a load error.
 */
import type { PagedKVMemory } from '../../kv/interfaces.ts';
import { CpuSlotBuffers } from './cpu-slot-buffers.ts';
import { copyBlocksToChunk, copyChunkToBlocks } from './kv-copy.ts';
import type { KVTier, TierEntry } from './kv-tier.ts';
import type { OffloadLayout } from './layout.ts';
import type { P2PHub } from './p2p-hub.ts';
import { P2PTier } from './p2p-tier.ts';
import {
  type OffloadTransferOp,
  type OffloadTransferType,
  type OffloadWorkerStatsData,
  splitLoadsAndStores,
} from './stats.ts';
import type { LoadItem, LoadJob, OffloadMetadata, OffloadWorkerMeta } from './step-metadata.ts';

interface CompletedJob {
  reqId: string;
  invalidBlockIds: number[];
}

/** How long shutdown waits for in-flight loads and write-throughs. */
const SHUTDOWN_WAIT_MS = 2000;

export class OffloadWorker {
  readonly layout: OffloadLayout;
  readonly tiers: readonly KVTier[];
  #memory: PagedKVMemory | null = null;
  #buffers: CpuSlotBuffers | null = null;
  readonly #inflight = new Set<Promise<void>>();
  #completed: CompletedJob[] = [];
  #loadErrors: number[] = [];
  #lastStep = 0;
  #promoted: string[] = [];
  #failed: string[] = [];
  #storedSecondary: { tier: number; keys: string[] }[] = [];
  #reportedTiers = { errors: 0, corrupt: 0, outages: 0 };
  #stats = { storeBytes: 0, loadBytes: 0, secondaryHits: 0, secondaryMisses: 0, writeThroughBytes: 0 };
  #transfers: Partial<Record<OffloadTransferType, OffloadTransferOp[]>> = {};

  constructor(layout: OffloadLayout, tiers: readonly KVTier[]) {
    this.layout = layout;
    this.tiers = tiers;
  }

  /** The engine's p2p hub, when a p2p tier is configured. */
  get #p2p(): P2PHub | null {
    const tier = this.tiers.find((t) => t instanceof P2PTier);
    return tier ? (tier as P2PTier).hub : null;
  }

  register(memory: PagedKVMemory): void {
    this.#memory = memory;
    const buffers = new CpuSlotBuffers(this.layout.numSlots, this.layout.slotBytes);
    this.#buffers = buffers;
    this.#p2p?.attachSlots((slot) => buffers.read(slot));
  }

  startLoads(meta: OffloadMetadata): void {
    for (const job of meta.loads) {
      if (!job.async) {
        this.#loadCpuItems(job.items, this.#loadErrors);
        continue;
      }
      const done = this.#runAsync(job).finally(() => this.#inflight.delete(done));
      this.#inflight.add(done);
    }
  }

  /** GPU → CPU copies of this step, then the write-through in the background. */
  stores(meta: OffloadMetadata): void {
    const memory = this.#requireMemory();
    const buffers = this.#buffers as CpuSlotBuffers;
    const writeThrough: TierEntry[] = [];
    const started = performance.now();
    let bytes = 0;
    for (const op of meta.stores) {
      const group = this.layout.groups[op.group];
      if (!group || op.slot < 0 || op.slot >= buffers.numSlots) continue;
      const chunk = buffers.writable(op.slot).subarray(0, group.chunkBytes);
      copyBlocksToChunk(memory, group, op.blockIds, chunk, this.layout.blocksPerChunk);
      buffers.setLength(op.slot, group.chunkBytes);
      bytes += group.chunkBytes;
      if (op.writeThrough) writeThrough.push({ key: op.key, value: Buffer.from(chunk) });
    }
    const hub = meta.parks && meta.parks.length > 0 ? this.#p2p : null;
    for (const op of hub ? (meta.parks ?? []) : []) {
      const group = this.layout.groups[op.group];
      if (!group) continue;
      hub?.park(op.kvRequestId, op.key, group.chunkBytes, (into) =>
        copyBlocksToChunk(memory, group, op.blockIds, into, this.layout.blocksPerChunk),
      );
    }
    this.#stats.storeBytes += bytes;
    this.#recordTransfer('GPU_to_CPU', bytes, started);
    this.#lastStep = Math.max(this.#lastStep, meta.step);
    if (writeThrough.length > 0 && this.tiers.length > 0) {
      const done = this.#writeThrough(writeThrough).finally(() => this.#inflight.delete(done));
      this.#inflight.add(done);
    }
  }

  /** Requests whose async load finished; their load errors move to the error list. */
  takeFinishedLoads(): string[] {
    const done = this.#completed;
    this.#completed = [];
    for (const j of done) this.#loadErrors.push(...j.invalidBlockIds);
    return done.map((j) => j.reqId);
  }

  takeLoadErrors(): number[] {
    const out = this.#loadErrors;
    this.#loadErrors = [];
    return out;
  }

  workerMeta(): OffloadWorkerMeta {
    const evictedSecondary = this.tiers
      .map((t, tier) => ({ tier, keys: t.takeEvicted() }))
      .filter((e) => e.keys.length > 0);
    const meta: OffloadWorkerMeta = {
      step: this.#lastStep,
      promoted: this.#promoted,
      failed: this.#failed,
      storedSecondary: this.#storedSecondary,
      evictedSecondary,
    };
    this.#promoted = [];
    this.#failed = [];
    this.#storedSecondary = [];
    return meta;
  }

  stats(): OffloadWorkerStatsData {
    const s = this.#stats;
    this.#stats = { storeBytes: 0, loadBytes: 0, secondaryHits: 0, secondaryMisses: 0, writeThroughBytes: 0 };
    const tiers = { errors: 0, corrupt: 0, outages: 0 };
    for (const t of this.tiers) {
      const ts = t.stats();
      tiers.errors += ts.errors;
      tiers.corrupt += ts.corrupt;
      tiers.outages += (t as { health?: { outages: number } }).health?.outages ?? 0;
    }
    const seen = this.#reportedTiers;
    this.#reportedTiers = tiers;
    const transfers = this.#transfers;
    this.#transfers = {};
    const { loads, stores } = splitLoadsAndStores(transfers);
    // Counters since the last call: the engine sums what connectors report.
    return {
      offload_transfers: transfers,
      offload_load_ops: loads,
      offload_store_ops: stores,
      offload_store_bytes: s.storeBytes,
      offload_load_bytes: s.loadBytes,
      offload_secondary_hits: s.secondaryHits,
      offload_secondary_misses: s.secondaryMisses,
      offload_write_through_bytes: s.writeThroughBytes,
      offload_tier_errors: tiers.errors - seen.errors,
      offload_tier_corrupt: tiers.corrupt - seen.corrupt,
      offload_tier_outages: tiers.outages - seen.outages,
    };
  }

  async shutdown(): Promise<void> {
    const wait = Promise.allSettled([...this.#inflight]);
    await Promise.race([wait, new Promise((r) => setTimeout(r, SHUTDOWN_WAIT_MS).unref())]);
    await Promise.all(this.tiers.map((t) => t.close()));
  }

  #requireMemory(): PagedKVMemory {
    if (!this.#memory) throw new Error('OffloadingConnector worker: registerKvCaches was not called');
    return this.#memory;
  }

  #destinations(item: LoadItem): number[] {
    return item.blockIds.filter((id) => id !== 0);
  }

  /** CPU-tier items of one load job, copied as one CPU_to_GPU transfer. */
  #loadCpuItems(items: readonly LoadItem[], errors: number[]): void {
    const started = performance.now();
    let loaded = 0;
    for (const item of items) loaded += this.#loadFromCpu(item, errors);
    this.#stats.loadBytes += loaded;
    this.#recordTransfer('CPU_to_GPU', loaded, started);
  }

  /** Bytes copied into KV memory (0 when the slot holds nothing usable). */
  #loadFromCpu(item: LoadItem, errors: number[]): number {
    const group = this.layout.groups[item.group];
    const bytes = item.slot >= 0 ? this.#buffers?.read(item.slot) : null;
    if (!group || !bytes || bytes.byteLength !== group.chunkBytes) {
      errors.push(...this.#destinations(item));
      return 0;
    }
    copyChunkToBlocks(this.#requireMemory(), group, bytes, item.blockIds, this.layout.blocksPerChunk);
    return bytes.byteLength;
  }

  #recordTransfer(type: OffloadTransferType, bytes: number, startedMs: number): void {
    if (bytes <= 0) return;
    const op = { op_size: bytes, op_time: (performance.now() - startedMs) / 1000 };
    const ops = this.#transfers[type];
    if (ops) ops.push(op);
    else this.#transfers[type] = [op];
  }

  async #runAsync(job: LoadJob): Promise<void> {
    const errors: number[] = [];
    try {
      const bySource = new Map<number, LoadItem[]>();
      this.#loadCpuItems(
        job.items.filter((item) => item.source === 'cpu'),
        errors,
      );
      for (const item of job.items) {
        if (item.source !== 'cpu') bySource.set(item.source, [...(bySource.get(item.source) ?? []), item]);
      }
      await Promise.all(
        [...bySource].map(async ([tierIndex, items]) => {
          const started = performance.now();
          const tier = this.tiers[tierIndex];
          const lengths = items.map((i) => this.layout.groups[i.group]?.chunkBytes ?? 0);
          const ctx = job.p2p ? { p2p: job.p2p, lengths } : { lengths };
          const values = tier
            ? await tier.getMany(
                items.map((i) => i.key),
                ctx,
              )
            : items.map(() => null);
          let loaded = 0;
          items.forEach((item, i) => {
            loaded += this.#promote(item, values[i] ?? null, errors);
          });
          this.#recordTransfer('STORAGE_to_GPU', loaded, started);
        }),
      );
    } catch {
      for (const item of job.items) if (item.source !== 'cpu') errors.push(...this.#destinations(item));
    } finally {
      this.#completed.push({ reqId: job.reqId, invalidBlockIds: errors });
    }
  }

  /** Bytes copied into KV memory (0 on a miss). */
  #promote(item: LoadItem, value: Uint8Array | null, errors: number[]): number {
    const group = this.layout.groups[item.group];
    if (!group || !value || value.byteLength !== group.chunkBytes) {
      this.#stats.secondaryMisses++;
      errors.push(...this.#destinations(item));
      this.#failed.push(item.key);
      return 0;
    }
    this.#stats.secondaryHits++;
    if (item.slot >= 0 && this.#buffers) {
      this.#buffers.write(item.slot, value);
      this.#promoted.push(item.key);
    }
    copyChunkToBlocks(this.#requireMemory(), group, value, item.blockIds, this.layout.blocksPerChunk);
    this.#stats.loadBytes += value.byteLength;
    return value.byteLength;
  }

  async #writeThrough(entries: TierEntry[]): Promise<void> {
    await Promise.all(
      this.tiers.map(async (tier, index) => {
        const started = performance.now();
        const keys = await tier.putMany(entries);
        if (keys.length > 0) this.#storedSecondary.push({ tier: index, keys });
        const stored = new Set(keys);
        const bytes = entries.filter((e) => stored.has(e.key)).reduce((n, e) => n + e.value.byteLength, 0);
        this.#stats.writeThroughBytes += bytes;
        this.#recordTransfer('CPU_to_STORAGE', bytes, started);
      }),
    );
  }
}
