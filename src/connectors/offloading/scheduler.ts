/**
 * The scheduler half of the OffloadingConnector: answers prefix lookups from the CPU
 * index (synchronously) and the secondary tiers (asynchronously, "ask again" until known),
 * decides which computed chunks to store and which to load, and turns the workers'
 * reports into KV events. It never touches KV bytes and never awaits.
 */
import {
  addCachedTokens,
  type CachedTokensBySource,
  type CacheHitSource,
  slowestSource,
  trimCachedTokens,
} from '../../connector/cache-hit-source.ts';
import type {
  ConnectorRequest,
  KVConnectorOutput,
  MatchedTokens,
  SchedulerOutput,
} from '../../connector/types.ts';
import type { KVCacheBlocks, KVCacheEvent } from '../../kv/interfaces.ts';
import type { P2PSource } from '../../wire/index.ts';
import type { OffloadingConfig } from './config.ts';
import { CpuSlotIndex } from './cpu-slot-index.ts';
import type { KVTier } from './kv-tier.ts';
import type { OffloadLayout } from './layout.ts';
import { LookupTracker } from './lookup-tracker.ts';
import { OffloadEvents } from './offload-events.ts';
import type { P2PHub } from './p2p-hub.ts';
import type { PluginClass } from './plugin-module.ts';
import { type OffloadRequestParams, offloadRequestParams, type TierTraits } from './request-params.ts';
import { SecondaryLookup, type TierAllowed } from './secondary-lookup.ts';
import { type OffloadSchedulerStatsData, tierCacheHitSource } from './stats.ts';
import type {
  LoadItem,
  LoadJob,
  OffloadMetadata,
  OffloadWorkerMeta,
  ParkOp,
  StoreOp,
} from './step-metadata.ts';
import { WORKER_META_KEY } from './step-metadata.ts';

/** What the scheduler counts between two stats() calls. */
function emptySchedulerCounts() {
  return {
    storedChunks: 0,
    loadedChunks: 0,
    promotedChunks: 0,
    failedChunks: 0,
    evictedChunks: 0,
    allocationFailures: 0,
    storesSkipped: 0,
    lookupSyncDelays: [] as number[],
    lookupAsyncDelays: [] as number[],
  };
}

/** Slack on top of the tiers' own timeouts before an unanswered lookup counts as a miss. */
const LOOKUP_MARGIN_MS = 50;

/** What the scheduler knows of a secondary tier: its traits for `kv_load_tiers` and its event settings. */
export interface SecondaryTierInfo extends TierTraits {
  enableKvEvents: boolean;
}

export interface OffloadSchedulerOptions {
  /** One per tier; by default each tier's medium, no locality, no events. */
  tierInfo?: readonly SecondaryTierInfo[];
  /** The CPU tier's eviction policy class when it is not config.evictionPolicyClass (a spec's). */
  policyClass?: PluginClass | null;
  /** The p2p tier: its index in `tiers` and the engine's hub. */
  p2p?: { tier: number; hub: P2PHub } | null;
}

interface RequestState {
  req: ConnectorRequest;
  blockIds: number[][];
  /** Chunks before this index were stored (or skipped) already. */
  storeCursor: number;
  counted: boolean;
  /** Chunks [from, to) came from the tiers: they are stored already, never store them again. */
  loaded: { from: number; to: number };
  /** p2p producer: chunks before this index were parked for the remote decoder. */
  parkCursor: number;
}

export class OffloadScheduler {
  readonly layout: OffloadLayout;
  readonly config: OffloadingConfig;
  readonly index: CpuSlotIndex;
  readonly tracker: LookupTracker;
  readonly lookup: SecondaryLookup | null;
  readonly events: OffloadEvents;
  readonly tiers: readonly KVTier[];
  readonly tierInfo: readonly SecondaryTierInfo[];
  readonly p2p: { tier: number; hub: P2PHub } | null;
  readonly #requests = new Map<string, RequestState>();
  /** Each live request's kv_transfer_params settings, read once. */
  readonly #params = new Map<string, OffloadRequestParams>();
  /** The numComputedTokens each request's last lookup answered for. */
  readonly #lastLookup = new Map<string, number>();
  /** Where each just-admitted request's loaded tokens come from, until the engine asks. */
  readonly #hitSources = new Map<string, CachedTokensBySource>();
  #pendingLoads: LoadJob[] = [];
  readonly #asyncLoads = new Map<string, LoadJob>();
  readonly #syncLoadsByStep = new Map<number, LoadJob[]>();
  readonly #storesByStep = new Map<number, StoreOp[]>();
  #step = 0;
  #reportedTierErrors = 0;
  #stats = emptySchedulerCounts();
  /** performance.now() of each request's first deferred lookup, until one answers. */
  readonly #deferredSince = new Map<string, number>();

  constructor(
    layout: OffloadLayout,
    config: OffloadingConfig,
    tiers: readonly KVTier[],
    options: OffloadSchedulerOptions = {},
  ) {
    this.layout = layout;
    this.config = config;
    this.tiers = tiers;
    this.tierInfo =
      options.tierInfo ?? tiers.map((t) => ({ medium: t.medium, locality: null, enableKvEvents: false }));
    this.index = new CpuSlotIndex(
      layout.numSlots,
      config.evictionPolicy,
      options.policyClass ?? config.evictionPolicyClass,
    );
    this.tracker = new LookupTracker(config.storeThreshold, config.maxTrackerSize);
    const bound = tiers.reduce((ms, t) => ms + t.timeoutMs, LOOKUP_MARGIN_MS);
    this.lookup = tiers.length > 0 ? new SecondaryLookup(tiers, bound) : null;
    this.events = new OffloadEvents(layout.gpuBlockSize, config.selfDescribingKvEvents);
    this.p2p = options.p2p ?? null;
    this.p2p?.hub.attachIndex((key) => this.index.peek(key));
  }

  /** The peer a consumer request pulls from (remote_prefiller, else remote_kv_source), if a p2p tier exists. */
  #p2pSource(req: ConnectorRequest): { source: P2PSource; probe: boolean } | null {
    if (!this.p2p) return null;
    const roles = this.#paramsOf(req).p2p;
    if (roles?.prefiller) return { source: roles.prefiller, probe: false };
    if (roles?.kvSource) return { source: roles.kvSource, probe: true };
    return null;
  }

  /**
   * Per key, whether the request's p2p peer holds it: true for every key of a P/D consumer
   * (vLLM: the prefiller holds the whole prompt, no lookup round trip), the peer's answer for
   * a peer pull (undefined while it is on its way), null without a p2p source.
   */
  #p2pHits(
    req: ConnectorRequest,
    keys: readonly string[],
    allowed: TierAllowed,
  ): (boolean | undefined)[] | null {
    const p = this.#p2pSource(req);
    if (!p || !this.p2p || !allowed(this.p2p.tier)) return null;
    // A failed fetch or a refused lookup: the rest is computed locally (vLLM's _failed_req_ids).
    if (this.p2p.hub.hasFailed(p.source.kvRequestId)) return keys.map(() => false);
    if (!p.probe) return keys.map(() => true);
    return this.p2p.hub.lookup(p.source, keys);
  }

  /** The request's kv_transfer_params settings (read on first use). */
  #paramsOf(req: ConnectorRequest): OffloadRequestParams {
    let p = this.#params.get(req.requestId);
    if (!p) {
      p = offloadRequestParams(req.kvTransferParams, req.requestId);
      this.#params.set(req.requestId, p);
    }
    return p;
  }

  /** The secondary tiers the request may load from (`kv_load_tiers`). */
  #allowedTiers(req: ConnectorRequest): TierAllowed {
    const filter = this.#paramsOf(req).loadTierFilter;
    return (t) => {
      const info = this.tierInfo[t];
      return info !== undefined && filter.allows(info);
    };
  }

  /** vLLM's lookup: timed, and a deferred answer timed until the lookup that resolves it. */
  getNumNewMatchedTokens(req: ConnectorRequest, numComputedTokens: number): MatchedTokens {
    const start = performance.now();
    const matched = this.#match(req, numComputedTokens);
    const now = performance.now();
    this.#stats.lookupSyncDelays.push((now - start) / 1000);
    const id = req.requestId;
    if (matched.count === null) {
      if (!this.#deferredSince.has(id)) this.#deferredSince.set(id, start);
    } else {
      this.#observeAsyncDelay(id, now);
    }
    return matched;
  }

  #observeAsyncDelay(reqId: string, now: number): void {
    const since = this.#deferredSince.get(reqId);
    if (since === undefined) return;
    this.#deferredSince.delete(reqId);
    this.#stats.lookupAsyncDelays.push((now - since) / 1000);
  }

  #match(req: ConnectorRequest, numComputedTokens: number): MatchedTokens {
    const L = this.layout;
    const maxChunks = Math.min(
      Math.floor((req.numTokens - 1) / L.chunkTokens),
      Math.floor(req.blockHashes.length / L.blocksPerChunk),
    );
    const start = Math.floor(numComputedTokens / L.chunkTokens);
    if (start >= maxChunks) return { count: 0, loadAsync: false };
    const chunkKeys: string[][] = [];
    for (let c = start; c < maxChunks; c++) chunkKeys.push(L.chunkKeys(req.blockHashes, c) ?? []);
    if (this.lookup) this.lookup.prefetch(chunkKeys.flat().filter((k) => !this.index.isReady(k)));
    const allowed = this.#allowedTiers(req);
    let end = start;
    let loadAsync = false;
    for (const keys of chunkKeys) {
      if (keys.length === 0) break;
      if (keys.every((k) => this.index.isReady(k))) {
        end++;
        continue;
      }
      if (!this.lookup) break;
      const p2p = this.#p2pHits(req, keys, allowed);
      const where = keys.map((k, i) => {
        if (this.index.isReady(k)) return 'cpu';
        if (p2p && p2p[i] === undefined) return 'unknown';
        if (p2p?.[i] && this.p2p) return this.p2p.tier;
        return (this.lookup as SecondaryLookup).locate(k, Date.now(), allowed);
      });
      if (where.includes('unknown')) return { count: null, loadAsync: false };
      if (where.includes(-1)) break;
      loadAsync = true;
      end++;
    }
    this.#lastLookup.set(req.requestId, numComputedTokens);
    const count = Math.max(0, end * L.chunkTokens - numComputedTokens);
    return { count, loadAsync: count > 0 && loadAsync };
  }

  updateStateAfterAlloc(req: ConnectorRequest, blocks: KVCacheBlocks, numExternalTokens: number): void {
    const st = this.#state(req);
    st.blockIds = blocks.getBlockIds().map((ids) => [...ids]);
    if (!st.counted) {
      st.counted = true;
      const prompt = Math.floor(req.numPromptTokens / this.layout.chunkTokens);
      for (let c = 0; c < prompt; c++)
        for (const k of this.layout.chunkKeys(req.blockHashes, c) ?? []) this.tracker.record(k);
    }
    if (numExternalTokens > 0) {
      const start = this.#lastLookup.get(req.requestId) ?? req.numComputedTokens;
      this.#pendingLoads.push(this.#planLoad(st, start, start + numExternalTokens));
      st.loaded = {
        from: Math.floor(start / this.layout.chunkTokens),
        to: Math.ceil((start + numExternalTokens) / this.layout.chunkTokens),
      };
    }
    this.#lastLookup.delete(req.requestId);
    this.#forgetLookups(req);
  }

  buildConnectorMeta(so: SchedulerOutput): OffloadMetadata {
    const step = ++this.#step;
    const computedBefore = new Map<string, number>();
    for (const nr of so.scheduledNewReqs) {
      const st = this.#requests.get(nr.reqId);
      if (st) st.blockIds = nr.blockIds.map((ids) => [...ids]);
      computedBefore.set(nr.reqId, nr.numComputedTokens);
    }
    const cached = so.scheduledCachedReqs;
    cached.reqIds.forEach((id, i) => {
      computedBefore.set(id, cached.numComputedTokens[i] ?? 0);
      const st = this.#requests.get(id);
      const added = cached.newBlockIds[i];
      if (!st || !added) return;
      if (cached.resumedFromPreemption[i]) st.blockIds = added.map((ids) => [...ids]);
      else
        added.forEach((ids, g) => {
          st.blockIds[g]?.push(...ids);
        });
    });
    const stores: StoreOp[] = [];
    const parks: ParkOp[] = [];
    for (const [id, before] of computedBefore) {
      const n = so.numScheduledTokens[id] ?? 0;
      const st = this.#requests.get(id);
      if (n > 0 && st) {
        stores.push(...this.#planStores(st, before + n));
        if (this.p2p) parks.push(...this.#planParks(st, before + n));
      }
    }
    const loads = this.#pendingLoads;
    this.#pendingLoads = [];
    for (const job of loads) {
      if (job.async) this.#asyncLoads.set(job.reqId, job);
      else this.#syncLoadsByStep.set(step, [...(this.#syncLoadsByStep.get(step) ?? []), job]);
    }
    if (stores.length > 0) this.#storesByStep.set(step, stores);
    return this.p2p ? { step, stores, loads, parks } : { step, stores, loads };
  }

  updateConnectorOutput(out: KVConnectorOutput): void {
    const meta = out.kvConnectorWorkerMeta?.[WORKER_META_KEY] as OffloadWorkerMeta | undefined;
    if (meta) this.#applyWorkerMeta(meta);
    for (const id of out.finishedRecving ?? []) {
      const job = this.#asyncLoads.get(id);
      if (!job) continue;
      this.#asyncLoads.delete(id);
      for (const item of job.items) if (item.slot >= 0) this.index.unpin(item.key);
    }
  }

  /** The sources of the tokens the request was admitted with (read once, after updateStateAfterAlloc). */
  externalCacheHitSources(req: ConnectorRequest, numExternalTokens: number): CachedTokensBySource {
    const planned = this.#hitSources.get(req.requestId) ?? { external_unspecified: numExternalTokens };
    this.#hitSources.delete(req.requestId);
    return trimCachedTokens(planned, numExternalTokens);
  }

  requestFinished(req: ConnectorRequest): void {
    this.#observeAsyncDelay(req.requestId, performance.now());
    const roles = this.p2p ? this.#paramsOf(req).p2p : null;
    if (roles?.decoder) this.p2p?.hub.closeParking(roles.decoder.kvRequestId);
    const source = roles?.prefiller ?? roles?.kvSource;
    if (source) this.p2p?.hub.forgetRequest(source.kvRequestId);
    this.#requests.delete(req.requestId);
    this.#hitSources.delete(req.requestId);
    this.#params.delete(req.requestId);
    this.#lastLookup.delete(req.requestId);
    this.#forgetLookups(req);
  }

  takeEvents(): KVCacheEvent[] {
    return this.events.take();
  }

  resetCache(): boolean {
    this.events.removed(this.index.clear(), 'CPU');
    this.lookup?.clear();
    return true;
  }

  stats(): OffloadSchedulerStatsData {
    const s = this.#stats;
    this.#stats = emptySchedulerCounts();
    const tierErrors = this.tiers.reduce((n, t) => n + t.stats().errors, 0);
    const newErrors = tierErrors - this.#reportedTierErrors;
    this.#reportedTierErrors = tierErrors;
    return {
      offload_stored_chunks: s.storedChunks,
      offload_loaded_chunks: s.loadedChunks,
      offload_promoted_chunks: s.promotedChunks,
      offload_failed_chunks: s.failedChunks,
      offload_cpu_evicted_chunks: s.evictedChunks,
      offload_lookup_tier_errors: newErrors,
      offload_lookup_sync_delays: s.lookupSyncDelays,
      offload_lookup_async_delays: s.lookupAsyncDelays,
      offload_allocation_failures: s.allocationFailures,
      offload_cpu_cache_usage: [this.index.numSlots > 0 ? this.index.numBusy() / this.index.numSlots : 0],
      offload_stores_skipped: s.storesSkipped,
    };
  }

  #state(req: ConnectorRequest): RequestState {
    let st = this.#requests.get(req.requestId);
    if (!st) {
      st = { req, blockIds: [], storeCursor: 0, counted: false, loaded: { from: 0, to: 0 }, parkCursor: 0 };
      this.#requests.set(req.requestId, st);
    }
    st.req = req;
    return st;
  }

  /** Secondary-tier answers are only valid while a request is being admitted: a later one must ask again. */
  #forgetLookups(req: ConnectorRequest): void {
    if (!this.lookup) return;
    const chunks = Math.floor(req.blockHashes.length / this.layout.blocksPerChunk);
    for (let c = 0; c < chunks; c++) this.lookup.forget(this.layout.chunkKeys(req.blockHashes, c) ?? []);
  }

  #evicted(evicted: readonly { key: string }[]): void {
    if (evicted.length === 0) return;
    const keys = evicted.map((e) => e.key);
    this.#stats.evictedChunks += keys.length;
    this.events.removed(keys, 'CPU');
    this.lookup?.forget(keys);
  }

  #planLoad(st: RequestState, startToken: number, endToken: number): LoadJob {
    const L = this.layout;
    const items: LoadItem[] = [];
    const allowed = this.#allowedTiers(st.req);
    const sources: CachedTokensBySource = {};
    for (let c = Math.floor(startToken / L.chunkTokens); c < endToken / L.chunkTokens; c++) {
      const keys = L.chunkKeys(st.req.blockHashes, c) ?? [];
      const chunkStart = items.length;
      keys.forEach((key, g) => {
        const blockIds: number[] = [];
        for (let p = 0; p < L.blocksPerChunk; p++) {
          const b = c * L.blocksPerChunk + p;
          blockIds.push(b * L.gpuBlockSize < startToken ? 0 : (st.blockIds[g]?.[b] ?? 0));
        }
        const describe = () =>
          this.events.describe(
            key,
            g,
            st.req.blockHashes,
            c * L.blocksPerChunk,
            L.blocksPerChunk,
            st.req.allTokenIds,
          );
        const cpuSlot = this.index.peek(key);
        if (cpuSlot !== null) {
          this.index.pin(key);
          this.index.touch(key);
          // A ready CPU hit backfills the chunk's event metadata (for its later removal).
          describe();
          items.push({ key, group: g, slot: cpuSlot, source: 'cpu', blockIds });
          return;
        }
        const onPeer = this.#p2pHits(st.req, [key], allowed)?.[0] === true && this.p2p !== null;
        const where = onPeer ? this.p2p?.tier : this.lookup?.locate(key, Date.now(), allowed);
        const alloc = this.index.allocate(key);
        if (alloc) {
          this.#evicted(alloc.evicted);
          this.index.pin(key);
          describe();
        }
        items.push({
          key,
          group: g,
          slot: alloc ? alloc.slot : -1,
          source: typeof where === 'number' && where >= 0 ? where : 0,
          blockIds,
        });
      });
      this.lookup?.forget(keys);
      const tokens = Math.min(endToken, (c + 1) * L.chunkTokens) - Math.max(startToken, c * L.chunkTokens);
      addCachedTokens(sources, this.#chunkSource(items.slice(chunkStart)), tokens);
    }
    this.#hitSources.set(st.req.requestId, sources);
    this.#stats.loadedChunks += items.length;
    const job: LoadJob = { reqId: st.req.requestId, async: items.some((i) => i.source !== 'cpu'), items };
    const p2p = this.#p2pSource(st.req);
    if (p2p && items.some((i) => i.source === this.p2p?.tier)) job.p2p = p2p.source;
    return job;
  }

  /**
   * p2p producer (`remote_decoder`): every full prompt chunk computed so far, local prefix
   * hits and loaded chunks included, is parked for the decoder; max_offload_tokens and the
   * CPU tier's admission do not apply (the decoder needs the whole prompt).
   */
  #planParks(st: RequestState, computedAfter: number): ParkOp[] {
    const decoder = this.#paramsOf(st.req).p2p?.decoder;
    if (!decoder) return [];
    const L = this.layout;
    const req = st.req;
    const done = Math.min(
      Math.floor(Math.min(computedAfter, req.numPromptTokens) / L.chunkTokens),
      Math.floor(req.blockHashes.length / L.blocksPerChunk),
    );
    const ops: ParkOp[] = [];
    for (let c = st.parkCursor; c < done; c++) {
      (L.chunkKeys(req.blockHashes, c) ?? []).forEach((key, g) => {
        const blockIds = (st.blockIds[g] ?? []).slice(c * L.blocksPerChunk, (c + 1) * L.blocksPerChunk);
        if (blockIds.length < L.blocksPerChunk || blockIds.includes(0)) return;
        ops.push({ kvRequestId: decoder.kvRequestId, key, group: g, blockIds });
      });
    }
    st.parkCursor = Math.max(st.parkCursor, done);
    return ops;
  }

  /** A chunk's KV is there once every group's part is: it counts under the slowest source. */
  #chunkSource(items: readonly LoadItem[]): CacheHitSource {
    return slowestSource(
      items.map((i) => (i.source === 'cpu' ? 'host' : tierCacheHitSource(this.tiers[i.source]?.kind ?? ''))),
    );
  }

  #planStores(st: RequestState, computedAfter: number): StoreOp[] {
    const L = this.layout;
    const req = st.req;
    const cap = this.#paramsOf(req).maxOffloadTokens;
    const limit = Math.min(
      this.config.offloadPromptOnly ? req.numPromptTokens : req.numTokens,
      cap ?? Number.POSITIVE_INFINITY,
    );
    const done = Math.min(
      Math.floor(Math.min(computedAfter, limit) / L.chunkTokens),
      Math.floor(req.blockHashes.length / L.blocksPerChunk),
    );
    const ops: StoreOp[] = [];
    let allocationFailed = false;
    for (let c = st.storeCursor; c < done; c++) {
      if (c >= st.loaded.from && c < st.loaded.to) continue;
      const keys = L.chunkKeys(req.blockHashes, c) ?? [];
      keys.forEach((key, g) => {
        if (this.index.has(key)) return;
        if (!this.tracker.shouldStore(key)) {
          this.#stats.storesSkipped++;
          return;
        }
        const blockIds = (st.blockIds[g] ?? []).slice(c * L.blocksPerChunk, (c + 1) * L.blocksPerChunk);
        if (blockIds.length < L.blocksPerChunk || blockIds.includes(0)) return;
        const alloc = this.index.allocate(key);
        if (!alloc) {
          allocationFailed = true;
          return;
        }
        this.#evicted(alloc.evicted);
        this.events.describe(
          key,
          g,
          req.blockHashes,
          c * L.blocksPerChunk,
          L.blocksPerChunk,
          req.allTokenIds,
        );
        ops.push({ key, group: g, slot: alloc.slot, blockIds, writeThrough: this.tiers.length > 0 });
      });
    }
    st.storeCursor = Math.max(st.storeCursor, done);
    this.#stats.storedChunks += ops.length;
    // vLLM counts a failed prepare_store: one per request and step.
    if (allocationFailed) this.#stats.allocationFailures++;
    return ops;
  }

  #applyWorkerMeta(meta: OffloadWorkerMeta): void {
    for (const [step, stores] of this.#storesByStep) {
      if (step > meta.step) continue;
      this.#storesByStep.delete(step);
      for (const s of stores) this.index.markReady(s.key);
      this.events.stored(
        stores.map((s) => s.key),
        'CPU',
      );
    }
    for (const [step, jobs] of this.#syncLoadsByStep) {
      if (step > meta.step) continue;
      this.#syncLoadsByStep.delete(step);
      for (const job of jobs) for (const item of job.items) this.index.unpin(item.key);
    }
    for (const key of meta.failed) {
      if (!this.index.isReady(key)) this.index.remove(key);
    }
    this.#stats.failedChunks += meta.failed.length;
    for (const key of meta.promoted) this.index.markReady(key);
    this.#stats.promotedChunks += meta.promoted.length;
    this.events.stored(meta.promoted, 'CPU');
    for (const s of meta.storedSecondary) {
      const info = this.tierInfo[s.tier];
      if (info?.enableKvEvents) this.events.stored(s.keys, 'STORAGE', info.locality, `tier${s.tier}`);
    }
    for (const s of meta.evictedSecondary) {
      const info = this.tierInfo[s.tier];
      if (info?.enableKvEvents) this.events.removed(s.keys, 'STORAGE', info.locality, `tier${s.tier}`);
    }
  }
}
