/**
 * ExampleConnector's scheduler side: which admitted requests load from storage and which
 * must be stored, turned into per-step jobs. A store job is emitted in the step in which the
 * request's stored tokens are all computed (the whole prompt prefix, even with chunked
 * prefill), so the worker saves complete KV.
 */
import type { SchedulerOutput } from '../../connector/types.ts';
import type { ExampleConnectorMetadata, ExampleLoadJob, ExampleSaveJob } from './step-metadata.ts';

interface PendingLoad {
  key: string;
  firstBlock: number;
  numBlocks: number;
}

interface PendingSave {
  key: string;
  numBlocks: number;
  blockIds: number[];
  saved: boolean;
}

export class ExampleScheduler {
  readonly #blockSize: number;
  readonly #loads = new Map<string, PendingLoad>();
  readonly #saves = new Map<string, PendingSave>();

  constructor(blockSize: number) {
    this.#blockSize = blockSize;
  }

  planLoad(reqId: string, key: string, firstBlock: number, numBlocks: number): void {
    this.#loads.set(reqId, { key, firstBlock, numBlocks });
    this.#saves.delete(reqId);
  }

  /** Tracks a request whose prompt is not stored yet; a request already saved stays saved. */
  planSave(reqId: string, key: string, numBlocks: number): void {
    if (this.#saves.has(reqId) || this.#loads.has(reqId)) return;
    this.#saves.set(reqId, { key, numBlocks, blockIds: [], saved: false });
  }

  forget(reqId: string): void {
    this.#loads.delete(reqId);
    this.#saves.delete(reqId);
  }

  get numTracked(): number {
    return this.#loads.size + this.#saves.size;
  }

  /** Builds this step's jobs and resets the per-step load state. */
  build(out: SchedulerOutput): ExampleConnectorMetadata {
    const loads: ExampleLoadJob[] = [];
    const saves: ExampleSaveJob[] = [];
    const takeLoad = (reqId: string, blockIds: number[]): void => {
      const load = this.#loads.get(reqId);
      if (!load) return;
      this.#loads.delete(reqId);
      const ids = blockIds.slice(load.firstBlock, load.numBlocks);
      if (ids.length > 0) loads.push({ reqId, key: load.key, firstBlock: load.firstBlock, blockIds: ids });
    };
    const keysThisStep = new Set<string>();
    const maybeSave = (reqId: string, computedAfterStep: number, blockSize: number): void => {
      const save = this.#saves.get(reqId);
      if (!save || save.saved || keysThisStep.has(save.key)) return;
      if (computedAfterStep < save.numBlocks * blockSize || save.blockIds.length < save.numBlocks) return;
      save.saved = true;
      keysThisStep.add(save.key);
      saves.push({ reqId, key: save.key, blockIds: save.blockIds.slice(0, save.numBlocks) });
    };
    const scheduled = (reqId: string): number => out.numScheduledTokens[reqId] ?? 0;

    for (const req of out.scheduledNewReqs) {
      const ids = req.blockIds[0] ?? [];
      takeLoad(req.reqId, ids);
      const save = this.#saves.get(req.reqId);
      if (save) save.blockIds = [...ids];
      maybeSave(req.reqId, req.numComputedTokens + scheduled(req.reqId), this.#blockSize);
    }
    const cached = out.scheduledCachedReqs;
    cached.reqIds.forEach((reqId, i) => {
      const newIds = cached.newBlockIds[i]?.[0] ?? [];
      const resumed = cached.resumedFromPreemption[i] === true;
      if (resumed) takeLoad(reqId, newIds);
      const save = this.#saves.get(reqId);
      if (save) save.blockIds = resumed ? [...newIds] : [...save.blockIds, ...newIds];
      maybeSave(reqId, (cached.numComputedTokens[i] ?? 0) + scheduled(reqId), this.#blockSize);
    });
    return { loads, saves };
  }
}
