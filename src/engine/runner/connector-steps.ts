/**
 * The worker-side connector hooks of one step, in vLLM's order
 * (docs/engine.md#one-step-on-a-rank-worker-side-connector-order, worker execute_model):
 * handlePreemptions → bindConnectorMetadata → startLoadKv → per layer waitForLayerLoad /
 * saveKvLayer → waitForSave → getFinished → getBlockIdsWithLoadErrors → getKvConnectorStats →
 * getKvConnectorKvCacheEvents → buildConnectorWorkerMeta → clearConnectorMetadata. Idle steps
 * run the same sequence without the forward pass and without waitForSave, so transfers still
 * progress.
 */
import type { KVConnectorBase } from '../../connector/base.ts';
import type { ForwardContext, KVConnectorOutput, SchedulerOutput } from '../../connector/types.ts';
import type { ForwardHooks } from '../model/forward-batch.ts';
import type { RunnerRequestState } from './request-states.ts';
import { allocatedBlockIds, filledBlockIds } from './written-blocks.ts';

export class WorkerConnectorSteps {
  readonly connector: KVConnectorBase;
  #context: ForwardContext | null = null;

  constructor(connector: KVConnectorBase) {
    this.connector = connector;
  }

  /** Before the runner updates its request state: preempted blocks may be reused this step. */
  async handlePreemptions(schedulerOutput: SchedulerOutput): Promise<void> {
    await this.connector.handlePreemptions(schedulerOutput.kvConnectorMetadata ?? {});
  }

  /** Write tracking (written-blocks.ts): blocks given to new content, before any load into them. */
  blocksAllocated(schedulerOutput: SchedulerOutput): void {
    const ids = allocatedBlockIds(schedulerOutput);
    if (ids.length > 0) this.connector.kvBlocksAllocated(ids);
  }

  /** Write tracking: blocks the forward pass just filled. */
  blocksFilled(running: readonly RunnerRequestState[], blockSizes: readonly number[]): void {
    const ids = filledBlockIds(running, blockSizes);
    if (ids.length > 0) this.connector.kvBlocksFilled(ids);
  }

  async beginStep(schedulerOutput: SchedulerOutput, hasForward: boolean): Promise<void> {
    this.#context = { schedulerOutput, hasForward };
    this.connector.bindConnectorMetadata(schedulerOutput.kvConnectorMetadata ?? {});
    await this.connector.startLoadKv(this.#context);
  }

  /** Layer hooks for model.forward: wait for the layer's load before, save after attention. */
  forwardHooks(): ForwardHooks {
    const connector = this.connector;
    return {
      beforeLayer: (_index, layerName) => connector.waitForLayerLoad(layerName),
      afterLayer: (_index, layerName) => connector.saveKvLayer(layerName, this.#requireContext()),
    };
  }

  async endStep(schedulerOutput: SchedulerOutput, hasForward: boolean): Promise<KVConnectorOutput> {
    const connector = this.connector;
    try {
      if (hasForward) await connector.waitForSave();
      const finished = await connector.getFinished(schedulerOutput.finishedReqIds);
      const invalidBlockIds = connector.getBlockIdsWithLoadErrors();
      const kvConnectorStats = connector.getKvConnectorStats();
      const kvCacheEvents = connector.getKvConnectorKvCacheEvents();
      const kvConnectorWorkerMeta = connector.buildConnectorWorkerMeta();
      return {
        finishedSending: nonEmpty(finished.sending),
        finishedRecving: nonEmpty(finished.recving),
        invalidBlockIds: [...invalidBlockIds],
        kvConnectorStats,
        kvCacheEvents,
        kvConnectorWorkerMeta,
        expectedFinishedCount: 0,
      };
    } finally {
      connector.clearConnectorMetadata();
      this.#context = null;
    }
  }

  #requireContext(): ForwardContext {
    if (this.#context === null) throw new Error('saveKvLayer called outside a step');
    return this.#context;
  }
}

function nonEmpty(ids: Iterable<string> | null): string[] | null {
  if (ids === null) return null;
  const list = [...ids];
  return list.length > 0 ? list : null;
}
