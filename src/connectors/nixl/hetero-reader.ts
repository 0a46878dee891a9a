/**
 * Pull-mode loads from a producer with a different tensor-parallel size
 * (docs/connectors/nixl.md#different-tensor-parallel-sizes-on-p-and-d-pull) or a smaller
 * block size (#different-block-sizes-on-p-and-d). Per request: handshake with every mapped
 * producer rank, READ whole remote blocks from the ranks that hold this rank's heads (GQA
 * dedup) into staging, then copy the head slices, or the sub-blocks, into the local blocks.
 * Producer ranks mapped to this rank but not read get a bare notification, so each producer
 * rank frees after consumersPerProducer notifications.
 */

import { KVError } from '../../errors/kv-error.ts';
import { dtypeBytes } from '../../kv/dtype.ts';
import type { KVCacheConfig, PagedKVMemory } from '../../kv/interfaces.ts';
import { getLogger } from '../../logging/logger.ts';
import type { TransferAgent, TransferHandle, TransferStatus } from '../../transfer/index.ts';
import { copySubBlock } from './block-ratio.ts';
import type { ExpiredReads } from './expired-reads.ts';
import { type HeadPlan, planHeads } from './head-plan.ts';
import { type BlockShape, type HeadCopy, scatterHeads } from './head-scatter.ts';
import type { RemoteEngines } from './remote-engines.ts';
import { readRetryDelayMs } from './retry-policy.ts';
import { StagingPool } from './staging-pool.ts';
import { loadTargets, pairLoad, type RecvJob } from './step-metadata.ts';

const log = getLogger('kvconnect.connectors.nixl.hetero-reader');

/** Staging region ids start here, far above the KV tensor indices. */
const STAGING_REGION_BASE = 1 << 20;

export interface HeteroReaderDeps {
  readonly agent: TransferAgent;
  readonly engines: RemoteEngines;
  readonly memory: PagedKVMemory;
  readonly kvCacheConfig: KVCacheConfig;
  readonly tpRank: number;
  readonly tpSize: number;
  readonly totalKvHeads: number;
  readonly maxModelLen: number;
  readonly leaseSeconds: number;
  readonly expiredReads: ExpiredReads;
  recvDone(reqId: string, invalidBlockIds: readonly number[]): void;
  /** Wakes the engine when a posted READ settles: the next step's poll reports it. */
  wakeWhenSettled(handle: TransferHandle): void;
}

interface SourceRead {
  readonly rank: number;
  readonly agentName: string;
  /** Staging slots, tensor-major: slots[t * remote blocks + b] holds remote block b of tensor t. */
  readonly slots: readonly number[];
  handle: TransferHandle | null;
  state: 'PROC' | 'DONE' | 'ERR';
  retries: number;
  timer: NodeJS.Timeout | null;
}

interface HeteroLoad {
  readonly job: RecvJob;
  readonly plan: HeadPlan;
  readonly pool: StagingPool;
  /** Local block of each remote block (several per local block when the ratio is above 1). */
  readonly local: readonly number[];
  /** Sub-block of the local block each remote block fills (0 with equal block sizes). */
  readonly sub: readonly number[];
  readonly remote: readonly number[];
  /** Local block size over the remote's. */
  readonly ratio: number;
  readonly sources: SourceRead[];
  readonly others: readonly { rank: number; agentName: string }[];
  readonly firstPostAt: number;
  failed: boolean;
}

export class HeteroTpReader {
  readonly #d: HeteroReaderDeps;
  readonly #shape: BlockShape;
  readonly #pools = new Map<number, StagingPool>();
  readonly #loads = new Set<HeteroLoad>();
  #pending = 0;

  constructor(deps: HeteroReaderDeps) {
    this.#d = deps;
    const spec = deps.kvCacheConfig.groups[0]!.spec;
    this.#shape = { blockSize: spec.blockSize, headBytes: spec.headSize * dtypeBytes(spec.dtype) };
  }

  get busy(): boolean {
    return this.#pending > 0 || this.#loads.size > 0;
  }

  /**
   * Starts a load once the handshakes with the producer ranks are done: they tell the
   * producer's clock (a READ of blocks about to expire is declined, ./expired-reads.ts) and
   * block size (a smaller one, same TP size, is remapped into sub-blocks, ./block-ratio.ts).
   * Failures, a failed handshake among them, are reported through recvDone with the
   * request's blocks.
   */
  start(job: RecvJob, notification: string): void {
    this.#pending++;
    this.#begin(job, notification)
      .catch((e: unknown) => {
        log.error(
          'NIXL transfer failure: %s | Context: %s',
          'handshake_failed',
          `request ${job.reqId} from ${job.remote.engineId}: ${String((e as Error)?.message ?? e)}`,
        );
        this.#d.recvDone(job.reqId, loadTargets(job));
      })
      .finally(() => this.#pending--);
  }

  async #begin(job: RecvJob, notification: string): Promise<void> {
    const d = this.#d;
    const plan = planHeads({
      localTp: d.tpSize,
      tpRank: d.tpRank,
      remoteTp: job.remote.tpSize,
      totalKvHeads: d.totalKvHeads,
    });
    const spec = d.kvCacheConfig.groups[0]!.spec;
    const expected = 2 * spec.blockSize * plan.localHeads.count * this.#shape.headBytes;
    if (
      spec.numKvHeads !== plan.localHeads.count ||
      d.memory.tensors.some((t) => t.blockBytes !== expected)
    ) {
      throw new KVError(
        'NIXL_HETERO_TP_LAYOUT',
        `rank ${d.tpRank} holds ${spec.numKvHeads} KV heads in ${d.memory.tensors[0]?.blockBytes}-byte blocks; heterogeneous TP expects ${plan.localHeads.count} heads in ${expected}-byte blocks`,
        { hint: 'Use the same tensor_parallel_size on both engines for this model.' },
      );
    }
    const names = new Map<number, string>();
    for (const rank of plan.notifyRanks) names.set(rank, await d.engines.connect(job.remote, rank));
    const first = plan.notifyRanks[0]!;
    const targets = loadTargets(job);
    if (targets.length > 0 && d.expiredReads.decline(job, d.engines.clockOffsetMs(job.remote, first))) {
      d.recvDone(job.reqId, targets);
      return;
    }
    const ratio = d.engines.blockRatio(job.remote, first) ?? 1;
    const pairs = pairLoad(d.kvCacheConfig, job, ratio);
    const { local, remote } = pairs;
    if (local.length === 0) {
      await Promise.all([...names.values()].map((n) => d.agent.sendNotification(n, notification)));
      return;
    }
    const pool = this.#poolFor(plan, ratio);
    const perSource = remote.length * d.memory.tensors.length;
    const slots = await pool.acquire(perSource * plan.readRanks.length);
    const load: HeteroLoad = {
      job,
      plan,
      pool,
      local,
      sub: pairs.sub,
      remote,
      ratio,
      sources: plan.readRanks.map((rank, i) => ({
        rank,
        agentName: names.get(rank)!,
        slots: slots.slice(i * perSource, (i + 1) * perSource),
        handle: null,
        state: 'PROC',
        retries: 0,
        timer: null,
      })),
      others: plan.notifyRanks
        .filter((r) => !plan.readRanks.includes(r))
        .map((rank) => ({ rank, agentName: names.get(rank)! })),
      firstPostAt: performance.now(),
      failed: false,
    };
    this.#loads.add(load);
    for (const s of load.sources) this.#post(load, s, notification);
  }

  #poolFor(plan: HeadPlan, ratio: number): StagingPool {
    const d = this.#d;
    const localBlockBytes = d.memory.tensors[0]!.blockBytes;
    const blockBytes = (localBlockBytes / plan.localHeads.count / ratio) * plan.remoteHeadsPerRank;
    let pool = this.#pools.get(blockBytes);
    if (!pool) {
      const perGroup = Math.ceil((d.maxModelLen * ratio) / this.#shape.blockSize) + 1;
      const perRequest = perGroup * d.kvCacheConfig.groups.length * d.memory.tensors.length;
      const capacity = perRequest * plan.readRanks.length;
      pool = new StagingPool(d.agent, STAGING_REGION_BASE + this.#pools.size, blockBytes, capacity);
      this.#pools.set(blockBytes, pool);
    }
    return pool;
  }

  #post(load: HeteroLoad, s: SourceRead, notification: string): void {
    const n = load.remote.length;
    const pairs = this.#d.memory.tensors.map((t, ti) => ({
      localRegion: load.pool.regionId,
      localBlockIds: s.slots.slice(ti * n, (ti + 1) * n),
      remoteRegion: t.index,
      remoteBlockIds: load.remote,
    }));
    try {
      s.handle = this.#d.agent.read(s.agentName, pairs, {
        notification,
        grantKey: load.job.remoteRequestId,
      });
      this.#d.wakeWhenSettled(s.handle);
    } catch (e) {
      log.error(
        'NIXL transfer failure: transfer_failed | Context: request %s: %s',
        load.job.reqId,
        String(e),
      );
      s.state = 'ERR';
      this.#fail(load, load.local);
    }
  }

  /** Polls posted READs; finishes, retries or fails loads. Called from getFinished. */
  poll(notification: (job: RecvJob) => string): void {
    for (const load of [...this.#loads]) {
      for (const s of load.sources) {
        if (s.state !== 'PROC' || !s.handle) continue;
        const status = this.#d.agent.status(s.handle);
        if (status.state === 'PROC') continue;
        this.#d.agent.releaseHandle(s.handle);
        s.handle = null;
        if (status.state === 'DONE') {
          s.state = 'DONE';
        } else if (!load.failed && this.#retry(load, s, status, notification(load.job))) {
          // reposted after a backoff
        } else {
          s.state = 'ERR';
          log.error(
            'NIXL transfer failure: transfer_failed | Context: request %s from rank %d: %s',
            load.job.reqId,
            s.rank,
            status.reason ?? '',
          );
          this.#fail(load, this.#localIdsOf(load, s, status.failedBlockIds));
        }
      }
      this.#settle(load, notification(load.job));
    }
  }

  #retry(load: HeteroLoad, s: SourceRead, status: TransferStatus, notification: string): boolean {
    const delay = readRetryDelayMs(status, s.retries, load.firstPostAt, this.#d.leaseSeconds * 1000);
    if (delay === null) return false;
    s.retries++;
    log.warn(
      'NIXL READ for request %s refused (%s); retrying in %d ms',
      load.job.reqId,
      status.reason ?? '',
      delay,
    );
    s.timer = setTimeout(() => {
      s.timer = null;
      if (load.failed) s.state = 'ERR';
      else this.#post(load, s, notification);
    }, delay);
    return true;
  }

  /** Reports the failure at once; staging is released only when no READ can still land. */
  #fail(load: HeteroLoad, invalid: readonly number[]): void {
    if (load.failed) return;
    load.failed = true;
    this.#d.recvDone(load.job.reqId, invalid.length > 0 ? invalid : [...new Set(load.local)]);
  }

  #settle(load: HeteroLoad, notification: string): void {
    const inFlight = load.sources.some((s) => s.state === 'PROC');
    if (inFlight) {
      if (!load.failed) return;
      for (const s of load.sources) {
        if (s.timer && s.handle === null) {
          clearTimeout(s.timer);
          s.timer = null;
          s.state = 'ERR';
        }
      }
      if (load.sources.some((s) => s.state === 'PROC')) return;
    }
    this.#loads.delete(load);
    if (!load.failed) this.#scatter(load);
    load.pool.release(load.sources.flatMap((s) => s.slots));
    // Producer ranks whose blocks were not (successfully) read still need to free them.
    const unread = [...load.others, ...load.sources.filter((s) => s.state !== 'DONE')];
    for (const o of unread) this.#d.agent.sendNotification(o.agentName, notification).catch(() => {});
    if (!load.failed) this.#d.recvDone(load.job.reqId, []);
  }

  #scatter(load: HeteroLoad): void {
    const { memory } = this.#d;
    const { plan, pool, local } = load;
    const n = load.remote.length;
    if (load.ratio !== 1) {
      // Same TP size: every head is this rank's; only the block size differs.
      const slots = load.sources[0]!.slots;
      memory.tensors.forEach((t, ti) => {
        for (let b = 0; b < n; b++) {
          const at = pool.offsetOf(slots[ti * n + b]!);
          copySubBlock(
            pool.bytes,
            at,
            t.bytes,
            local[b]! * t.blockBytes,
            t.blockBytes,
            load.ratio,
            load.sub[b]!,
          );
        }
      });
      return;
    }
    for (const s of load.sources) {
      const copies: HeadCopy[] = [];
      plan.heads.forEach((h, j) => {
        if (h.rank === s.rank) copies.push({ localIndex: j, remoteIndex: h.remoteIndex });
      });
      memory.tensors.forEach((t, ti) => {
        for (let b = 0; b < n; b++) {
          const slot = s.slots[ti * n + b]!;
          scatterHeads(
            this.#shape,
            pool.bytes,
            pool.offsetOf(slot),
            plan.remoteHeadsPerRank,
            t.bytes,
            local[b]! * t.blockBytes,
            plan.localHeads.count,
            copies,
          );
        }
      });
    }
  }

  /** Maps failed staging slots back to the local blocks they were meant for. */
  #localIdsOf(load: HeteroLoad, s: SourceRead, failedSlots: readonly number[]): number[] {
    const n = load.remote.length;
    const out = new Set<number>();
    for (const slot of failedSlots) {
      const i = s.slots.indexOf(slot);
      if (i >= 0) out.add(load.local[i % n]!);
    }
    return [...out].sort((a, b) => a - b);
  }

  shutdown(): void {
    for (const load of this.#loads) for (const s of load.sources) if (s.timer) clearTimeout(s.timer);
  }
}
