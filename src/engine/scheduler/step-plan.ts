/**
 * What one schedule() pass has decided so far: shared by the running phase and the
 * admission phase, then turned into the SchedulerOutput.
 */
import type { CachedRequestData, NewRequestData, SchedulerOutput } from '../../connector/types.ts';
import type { KVCacheBlocks, KVCacheManager } from '../../kv/interfaces.ts';
import type { Request } from '../request.ts';

export interface StepPlan {
  tokenBudget: number;
  scheduledNew: Request[];
  scheduledResumed: Request[];
  scheduledRunning: Request[];
  preempted: Request[];
  /** Blocks allocated this step per request (all blocks for new and resumed requests). */
  newBlocks: Map<string, KVCacheBlocks>;
  numScheduledTokens: Record<string, number>;
}

export function newStepPlan(tokenBudget: number): StepPlan {
  return {
    tokenBudget,
    scheduledNew: [],
    scheduledResumed: [],
    scheduledRunning: [],
    preempted: [],
    newBlocks: new Map(),
    numScheduledTokens: {},
  };
}

/** The SchedulerOutput of a plan, before numComputedTokens advance (vLLM's order). */
export function buildSchedulerOutput(
  plan: StepPlan,
  kv: KVCacheManager,
  finishedReqIds: string[],
  preemptedReqIds: string[],
): SchedulerOutput {
  const scheduledNewReqs: NewRequestData[] = plan.scheduledNew.map((req) => ({
    reqId: req.requestId,
    promptTokenIds: req.promptTokenIds,
    blockIds: kv.getBlockIds(req.requestId),
    numComputedTokens: req.numComputedTokens,
  }));
  const cached: CachedRequestData = {
    reqIds: [],
    resumedFromPreemption: [],
    newBlockIds: [],
    newTokenIds: [],
    numComputedTokens: [],
  };
  for (const req of plan.scheduledResumed) {
    cached.reqIds.push(req.requestId);
    cached.resumedFromPreemption.push(true);
    cached.newBlockIds.push(kv.getBlockIds(req.requestId));
    cached.newTokenIds.push([...req.allTokenIds]);
    cached.numComputedTokens.push(req.numComputedTokens);
  }
  for (const req of plan.scheduledRunning) {
    const ids = plan.newBlocks.get(req.requestId)?.getBlockIds() ?? null;
    cached.reqIds.push(req.requestId);
    cached.resumedFromPreemption.push(false);
    cached.newBlockIds.push(ids?.some((g) => g.length > 0) ? ids : null);
    cached.newTokenIds.push([]);
    cached.numComputedTokens.push(req.numComputedTokens);
  }
  const numScheduledTokens = { ...plan.numScheduledTokens };
  return {
    scheduledNewReqs,
    scheduledCachedReqs: cached,
    numScheduledTokens,
    totalNumScheduledTokens: Object.values(numScheduledTokens).reduce((a, b) => a + b, 0),
    finishedReqIds,
    preemptedReqIds,
    kvConnectorMetadata: null,
  };
}
