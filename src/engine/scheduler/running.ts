/**
 * Phase 1 of schedule(): running requests first (decode and the next prefill chunk),
 * within the token budget. When the pool cannot hold a request's new tokens, the last
 * running request is preempted (recompute) until the allocation fits or the request
 * itself was the victim.
 */
import type { KVCacheBlocks } from '../../kv/interfaces.ts';
import type { SchedulerCore } from './core.ts';
import type { StepPlan } from './step-plan.ts';

export function scheduleRunning(core: SchedulerCore, plan: StepPlan): void {
  let index = 0;
  while (index < core.running.length && plan.tokenBudget > 0) {
    const req = core.running[index];
    if (!req) break;
    let numNewTokens = Math.min(req.numTokens - req.numComputedTokens, plan.tokenBudget);
    numNewTokens = Math.min(numNewTokens, core.options.maxModelLen - req.numComputedTokens);
    if (numNewTokens <= 0) {
      index += 1;
      continue;
    }
    let blocks: KVCacheBlocks | null = null;
    for (;;) {
      blocks = core.kv.allocateSlots(req, numNewTokens);
      if (blocks) break;
      // FCFS: the lowest-priority request is the last one; it is never already scheduled.
      const victim = core.running.pop();
      if (!victim) break;
      core.preempt(victim);
      plan.preempted.push(victim);
      if (victim === req) break;
    }
    if (!blocks) break;
    plan.scheduledRunning.push(req);
    plan.newBlocks.set(req.requestId, blocks);
    plan.numScheduledTokens[req.requestId] = numNewTokens;
    plan.tokenBudget -= numNewTokens;
    index += 1;
  }
}
