/**
 * Scheduler side of MoRIIOConnector (docs/connectors/moriio.md). The producer (kv_role
 * kv_producer only; kv_both is a consumer, as in vLLM) tracks requests by transfer_id,
 * tells its workers which blocks each step computed, holds finished requests' blocks and
 * reconciles the workers' ACKs. The consumer decides what to load and how (WRITE: async,
 * the producer pushes; READ: in the forward pass, layer by layer) and addresses the
 * producer from the request id or the explicit params.
 */
import type { EngineConfig } from '../../config/types.ts';
import { blocksToLoad, pairByPosition, remotePositions } from '../../connector/block-lists.ts';
import type {
  ConnectorRequest,
  KVConnectorOutput,
  MatchedTokens,
  RequestFinishedResult,
  SchedulerOutput,
} from '../../connector/types.ts';
import type { KVCacheBlocks, KVCacheConfig } from '../../kv/interfaces.ts';
import { getLogger } from '../../logging/logger.ts';
import { moriioPrefillResult } from '../../wire/index.ts';
import { AckReconciler } from './ack-reconciler.ts';
import { type MoRIIOPeer, prefillPeerOf } from './addressing.ts';
import { type MoRIIOConfig, moriioPort } from './config.ts';
import { sendNotify } from './notify-channel.ts';
import type { MoRIIOSchedulerStatsData } from './stats.ts';
import { emptyStepMetadata, type MoRIIOStepMetadata } from './step-metadata.ts';

const log = getLogger('kvconnect.connectors.moriio.scheduler');

interface Produced {
  readonly transferId: string;
  readonly numPromptTokens: number;
  readonly consumerTpSize: number;
  blockIds: number[];
}

export class MoRIIOScheduler {
  readonly #cfg: MoRIIOConfig;
  readonly #engineConfig: EngineConfig;
  readonly #kvCacheConfig: KVCacheConfig;
  readonly isProducer: boolean;
  readonly #acks: AckReconciler;
  readonly #produced = new Map<string, Produced>();
  /** transfer_id ↔ request id, the cross-instance key (docs/connectors/moriio.md#addressing-the-peer). */
  readonly #reqOfTransfer = new Map<string, string>();
  #meta: MoRIIOStepMetadata = emptyStepMetadata();
  #reapedSends = 0;

  constructor(cfg: MoRIIOConfig, engineConfig: EngineConfig, kvCacheConfig: KVCacheConfig) {
    this.#cfg = cfg;
    this.#engineConfig = engineConfig;
    this.#kvCacheConfig = kvCacheConfig;
    this.isProducer = engineConfig.kvTransferConfig?.kv_role === 'kv_producer';
    this.#acks = new AckReconciler(cfg.deferTimeoutS);
  }

  get #blockSize(): number {
    return this.#kvCacheConfig.groups[0]?.spec.blockSize ?? 16;
  }

  get tpSize(): number {
    return this.#engineConfig.parallel.tensorParallelSize;
  }

  /** The request id a transfer belongs to (null once it is done). */
  requestOfTransfer(transferId: string): string | null {
    return this.#reqOfTransfer.get(transferId) ?? null;
  }

  getNumNewMatchedTokens(req: ConnectorRequest, numComputedTokens: number): MatchedTokens {
    if (req.kvTransferParams?.['do_remote_prefill'] !== true) return { count: 0, loadAsync: false };
    if (this.#cfg.readMode) {
      const count = req.numPromptTokens - 1 - numComputedTokens;
      return { count: Math.max(0, count), loadAsync: false };
    }
    const count = req.numPromptTokens - numComputedTokens;
    return count > 0 ? { count, loadAsync: true } : { count: 0, loadAsync: false };
  }

  updateStateAfterAlloc(req: ConnectorRequest, blocks: KVCacheBlocks, numExternalTokens: number): void {
    const p = req.kvTransferParams;
    if (p?.['do_remote_decode'] === true && typeof p['transfer_id'] === 'string') {
      this.#produced.set(req.requestId, {
        transferId: p['transfer_id'],
        numPromptTokens: req.numPromptTokens,
        consumerTpSize: positiveInt(p['remote_tp_size'], 1),
        blockIds: (blocks.blocks[0] ?? []).map((b) => b.blockId),
      });
      this.#reqOfTransfer.set(p['transfer_id'], req.requestId);
      return;
    }
    if (p?.['do_remote_prefill'] !== true) return;
    req.kvTransferParams = { ...p, do_remote_prefill: false };
    const transferId = typeof p['transfer_id'] === 'string' ? p['transfer_id'] : null;
    const local = blocksToLoad(this.#kvCacheConfig, blocks)[0] ?? { positions: [], ids: [] };
    let peer: MoRIIOPeer | null = null;
    try {
      peer = prefillPeerOf(req.requestId, p);
    } catch (e) {
      log.error('%s', (e as Error).message);
    }
    if (!peer || transferId === null) {
      if (!peer) log.warn('MoRIIO request %s names no prefill address; it will not load KV', req.requestId);
      else log.warn('MoRIIO request %s has no transfer_id; it will not load KV', req.requestId);
      if (numExternalTokens > 0) {
        this.#meta.failedLoads.push({
          reqId: req.requestId,
          blockIds: local.ids,
          async: !this.#cfg.readMode,
        });
      }
      return;
    }
    if (numExternalTokens === 0) {
      this.#release(peer, transferId, 'no tokens to load');
      return;
    }
    if (!this.#cfg.readMode) {
      this.#meta.writeRecvs.push({
        reqId: req.requestId,
        transferId,
        blockIds: local.ids,
        positions: local.positions,
        peer,
      });
      return;
    }
    // A synchronous load's blocks are already cached (hashed) here: take them by position.
    const remoteIds = groupZero(p['remote_block_ids']);
    const loaded = syncLoadBlocks(blocks, this.#blockSize, req.numPromptTokens - 1, numExternalTokens);
    const pairs = pairByPosition([loaded], remotePositions(this.#kvCacheConfig, [remoteIds], null));
    this.#meta.reads.push({
      reqId: req.requestId,
      transferId,
      localBlockIds: pairs.local[0] ?? [],
      remoteBlockIds: pairs.remote[0] ?? [],
      peer,
    });
  }

  buildConnectorMeta(out: SchedulerOutput): MoRIIOStepMetadata {
    const step = (reqId: string, blockIds: number[] | null, start: number, computed = start): void => {
      const t = this.#produced.get(reqId);
      if (!t) return;
      if (blockIds) t.blockIds = blockIds;
      if (start >= t.numPromptTokens) return;
      const end = Math.min(t.numPromptTokens, computed + (out.numScheduledTokens[reqId] ?? 0));
      if (end <= start) return;
      this.#meta.saves.push({
        reqId,
        transferId: t.transferId,
        blockIds: [...t.blockIds],
        start,
        end,
        last: end >= t.numPromptTokens,
      });
    };
    // Start at 0: blocks this engine had in its prefix cache must reach the consumer too.
    for (const r of out.scheduledNewReqs) step(r.reqId, r.blockIds[0] ?? [], 0, r.numComputedTokens);
    const cached = out.scheduledCachedReqs;
    cached.reqIds.forEach((id, i) => {
      const t = this.#produced.get(id);
      const added = cached.newBlockIds[i]?.[0] ?? [];
      step(id, t ? [...t.blockIds, ...added] : null, cached.numComputedTokens[i] ?? 0);
    });
    const meta = this.#meta;
    this.#meta = emptyStepMetadata();
    return meta;
  }

  requestFinished(req: ConnectorRequest, blockIds: number[][]): RequestFinishedResult {
    const p = req.kvTransferParams;
    const none = { delayFree: false, kvTransferParams: null };
    if (p?.['do_remote_prefill'] === true) {
      // Aborted or rejected before it was scheduled: let the producer free its blocks now.
      const transferId = p['transfer_id'];
      let peer: MoRIIOPeer | null = null;
      try {
        peer = prefillPeerOf(req.requestId, p);
      } catch (e) {
        log.warn('%s', (e as Error).message);
      }
      if (typeof transferId !== 'string') {
        log.warn('Cannot release WRITE prefill blocks for request %s: missing transfer_id', req.requestId);
      } else if (!peer) {
        log.warn(
          'Cannot release WRITE prefill blocks for request %s: missing remote notify address',
          req.requestId,
        );
      } else this.#release(peer, transferId, 'aborted before scheduling');
      return none;
    }
    if (p?.['do_remote_decode'] !== true) return none;
    const tracked = this.#produced.get(req.requestId);
    this.#produced.delete(req.requestId);
    const transferId = typeof p['transfer_id'] === 'string' ? p['transfer_id'] : tracked?.transferId;
    if (req.status !== 'FINISHED_LENGTH_CAPPED') {
      if (transferId) this.#drop(transferId);
      return none;
    }
    if (transferId === undefined) {
      log.error('MoRIIO producer request %s has no transfer_id in kv_transfer_params', req.requestId);
      return none;
    }
    const ids = blockIds[0] ?? [];
    const delay = ids.length > 0;
    if (delay) {
      this.#acks.defer(req.requestId, transferId);
      this.#meta.sends.push({
        reqId: req.requestId,
        transferId,
        consumerTpSize: tracked?.consumerTpSize ?? positiveInt(p['remote_tp_size'], 1),
      });
    } else this.#drop(transferId);
    const { parallel } = this.#engineConfig;
    return {
      delayFree: delay,
      kvTransferParams: moriioPrefillResult({
        engineId: this.#cfg.engineId,
        address: {
          host: this.#cfg.hostIp,
          handshakePort: this.#cfg.handshakePort,
          notifyPort: this.#cfg.notifyPort,
        },
        blockIds: ids,
        dpRank: parallel.dataParallelRank,
        dpSize: parallel.dataParallelSize,
        dpSizeLocal: parallel.dataParallelSizeLocal,
        tpSize: this.tpSize,
        transferId,
      }),
    };
  }

  updateConnectorOutput(out: KVConnectorOutput): void {
    if (!this.isProducer) return;
    out.finishedSending = this.#acks.reconcile(out.finishedSending, (tx) => {
      this.#reapedSends++;
      this.#meta.dropped.push(tx);
    });
    for (const id of out.finishedSending ?? []) {
      for (const [tx, r] of this.#reqOfTransfer) if (r === id) this.#reqOfTransfer.delete(tx);
    }
  }

  /** Scheduler-side stats since the last call: holds reaped after defer_timeout. */
  takeStats(): MoRIIOSchedulerStatsData | null {
    const n = this.#reapedSends;
    this.#reapedSends = 0;
    return n > 0 ? { num_reaped_sends: n } : null;
  }

  hasPendingWork(): boolean {
    return this.#acks.held > 0;
  }

  #drop(transferId: string): void {
    this.#reqOfTransfer.delete(transferId);
    this.#meta.dropped.push(transferId);
  }

  /** Tells every producer rank to free a transfer's blocks (the consumer will not load them). */
  #release(peer: MoRIIOPeer, transferId: string, why: string): void {
    for (let r = 0; r < peer.tpSize; r++) {
      const port = moriioPort(peer.notifyPort, peer.dpRankLocal, peer.tpSize, r);
      sendNotify(peer.host, port, {
        type: 'release',
        transfer_id: transferId,
        consumer_tp_size: this.tpSize,
        abort: true,
      }).catch((e: unknown) =>
        log.warn('MoRIIO release of %s (%s) failed: %s', transferId, why, (e as Error).message),
      );
    }
  }
}

function positiveInt(v: unknown, fallback: number): number {
  return typeof v === 'number' && Number.isInteger(v) && v > 0 ? v : fallback;
}

/** Blocks holding tokens [end - count, end) of group 0, by position (null blocks skipped). */
function syncLoadBlocks(
  blocks: KVCacheBlocks,
  blockSize: number,
  end: number,
  count: number,
): { positions: number[]; ids: number[] } {
  const out = { positions: [] as number[], ids: [] as number[] };
  const list = blocks.blocks[0] ?? [];
  for (let pos = Math.floor((end - count) / blockSize); pos < Math.ceil(end / blockSize); pos++) {
    const b = list[pos];
    if (!b || b.isNull) continue;
    out.positions.push(pos);
    out.ids.push(b.blockId);
  }
  return out;
}

function groupZero(v: unknown): number[] {
  if (!Array.isArray(v)) return [];
  const first = v[0];
  const list = Array.isArray(first) ? first : v;
  return list.filter((x): x is number => Number.isInteger(x));
}
