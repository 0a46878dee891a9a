/**
 * Phase 2 of schedule(): admission of waiting requests in FCFS order
 * (docs/scheduler.md#how-requests-move, step 2): promotion of finished async loads, the local
 * prefix hit, the connector's matched tokens (null = ask again next step), the partial-tail
 * rule, allocateSlots (with the reservation of in-flight async loads), updateStateAfterAlloc
 * for every admitted request, and async loads parked in WAITING_FOR_REMOTE_KVS.
 */
import { KVError } from '../../errors/kv-error.ts';
import type { KVCacheBlocks } from '../../kv/interfaces.ts';
import { wallClockMs } from '../iteration-stats.ts';
import type { Request } from '../request.ts';
import { transition } from '../request-lifecycle.ts';
import type { SchedulerCore } from './core.ts';
import { resolveExternalHit, truncateComputedBlocks } from './external-hit.ts';
import type { StepPlan } from './step-plan.ts';

interface Lookup {
  computedBlocks: KVCacheBlocks;
  numLocal: number;
  numExternal: number;
  loadAsync: boolean;
}

export function admitWaiting(core: SchedulerCore, plan: StepPlan): void {
  const queue = core.waiting;
  const keep: Request[] = [];
  // Set once a request could not get blocks: from then on only requests whose KV already
  // arrived are admitted (see below), the others keep their place.
  let blocked = false;
  // vLLM's max_loras: the adapters of the running requests, and of those admitted now.
  const maxLoras = core.options.maxLoras;
  const loras = new Set<number>();
  for (const r of core.running) if (r.loraRequest) loras.add(r.loraRequest.loraIntId);
  core.loraDeferred = 0;
  let index = 0;
  for (; index < queue.length && plan.tokenBudget > 0; index++) {
    if (core.running.length >= core.options.maxNumSeqs) break;
    const req = queue[index] as Request;
    if (blocked && !(req.status === 'WAITING_FOR_REMOTE_KVS' && core.finishedRecving.has(req.requestId))) {
      keep.push(req);
      continue;
    }
    if (req.status === 'WAITING_FOR_REMOTE_KVS' && !promote(core, req)) {
      keep.push(req);
      continue;
    }
    const lora = req.loraRequest?.loraIntId;
    if (maxLoras !== null && lora !== undefined && !loras.has(lora) && loras.size >= maxLoras) {
      core.loraDeferred += 1;
      keep.push(req);
      continue;
    }
    const fresh = req.numComputedTokens === 0;
    const lookup = fresh ? lookupPrefix(core, req) : alreadyComputed(core);
    if (!lookup) {
      keep.push(req);
      continue;
    }
    const numComputed = fresh ? lookup.numLocal + lookup.numExternal : req.numComputedTokens;
    let numNewTokens = 0;
    if (!lookup.loadAsync) {
      numNewTokens = req.numTokens - numComputed;
      if (!core.options.enableChunkedPrefill && numNewTokens > plan.tokenBudget) break;
      numNewTokens = Math.min(numNewTokens, plan.tokenBudget);
    }
    const blocks = core.kv.allocateSlots(req, numNewTokens, {
      numNewComputedTokens: lookup.numLocal,
      newComputedBlocks: lookup.computedBlocks,
      numExternalComputedTokens: lookup.numExternal,
      delayCacheBlocks: lookup.loadAsync,
      reservedBlocks: lookup.loadAsync ? core.inflightReservedBlocks() : 0,
    });
    if (!blocks) {
      if (req.lifecycle === 'LOOKUP_PENDING') transition(req, 'WAITING');
      // vLLM stops here (FCFS). But requests further back whose async load finished already
      // hold their blocks and need at most a few more; with a full pool and nothing running,
      // they are the only ones that can ever free blocks, so they may still be admitted
      // (a preempted request at the head otherwise deadlocks the engine for good).
      keep.push(req);
      blocked = true;
      continue;
    }
    transition(req, 'ALLOCATED');
    core.connector?.updateStateAfterAlloc(req, core.kv.getBlocks(req.requestId), lookup.numExternal);
    if (fresh) recordAdmission(core, req, lookup);

    req.numComputedTokens = numComputed;
    if (lookup.loadAsync) {
      req.status = 'WAITING_FOR_REMOTE_KVS';
      transition(req, 'WAITING_FOR_REMOTE_KV');
      if (req.metrics.milestones) req.metrics.milestones.kvLoadStartedAt = wallClockMs();
      core.inflightPrefills.add(req);
      keep.push(req);
      continue;
    }
    if (req.status === 'PREEMPTED') plan.scheduledResumed.push(req);
    else plan.scheduledNew.push(req);
    core.running.push(req);
    if (lora !== undefined) loras.add(lora);
    req.status = 'RUNNING';
    transition(req, 'RUNNING');
    plan.newBlocks.set(req.requestId, blocks);
    plan.numScheduledTokens[req.requestId] = numNewTokens;
    plan.tokenBudget -= numNewTokens;
    if (numComputed + numNewTokens < req.numTokens) core.inflightPrefills.add(req);
    else core.inflightPrefills.delete(req);
  }
  core.waiting = [...keep, ...queue.slice(index)];
}

/** Local prefix hit plus the connector's answer; null = the connector is still looking. */
function lookupPrefix(core: SchedulerCore, req: Request): Lookup | null {
  // vLLM: a request that wants prompt logprobs computes every position, so it reads no cache.
  const local =
    core.kv.enablePrefixCaching && (req.sampling.promptLogprobs ?? null) === null
      ? core.kv.getComputedBlocks(req)
      : { blocks: core.kv.emptyBlocks(), numComputedTokens: 0 };
  let lookup: Lookup = {
    computedBlocks: local.blocks,
    numLocal: local.numComputedTokens,
    numExternal: 0,
    loadAsync: false,
  };
  const connector = core.connector;
  if (connector) {
    const blockSize = core.options.blockSize;
    const aligned = lookup.numLocal - (lookup.numLocal % blockSize);
    const matched = connector.getNumNewMatchedTokens(req, aligned);
    if (matched.count === null) {
      if (req.lifecycle !== 'LOOKUP_PENDING') transition(req, 'LOOKUP_PENDING');
      return null;
    }
    const decision = resolveExternalHit(lookup.numLocal, blockSize, matched.count, matched.loadAsync);
    lookup = {
      computedBlocks: decision.dropLocalTail
        ? truncateComputedBlocks(local.blocks, decision.numLocal, core.kv.kvCacheConfig.groups, blockSize)
        : local.blocks,
      numLocal: decision.numLocal,
      numExternal: decision.numExternal,
      loadAsync: decision.loadAsync,
    };
  }
  const total = lookup.numLocal + lookup.numExternal;
  if (total > req.numTokens) {
    throw new KVError(
      'KV_CONNECTOR_MATCH_INVALID',
      `Request ${req.requestId}: ${total} computed tokens (local ${lookup.numLocal} + external ${lookup.numExternal}) exceed its ${req.numTokens} tokens`,
      { hint: 'getNumNewMatchedTokens must return at most numTokens - numComputedTokens.' },
    );
  }
  // A synchronous full hit leaves nothing to compute; recompute the last token for its logits.
  if (!lookup.loadAsync && total === req.numTokens) {
    if (lookup.numExternal > 0) {
      lookup.numExternal -= 1;
    } else {
      const blockSize = core.options.blockSize;
      const numLocal = Math.floor((req.numTokens - 1) / blockSize) * blockSize;
      const groups = core.kv.kvCacheConfig.groups;
      lookup = {
        ...lookup,
        numLocal,
        computedBlocks: truncateComputedBlocks(lookup.computedBlocks, numLocal, groups, blockSize),
      };
    }
  }
  return lookup;
}

/** A request that already has computed tokens (a promoted async load). */
function alreadyComputed(core: SchedulerCore): Lookup {
  return { computedBlocks: core.kv.emptyBlocks(), numLocal: 0, numExternal: 0, loadAsync: false };
}

function recordAdmission(core: SchedulerCore, req: Request, lookup: Lookup): void {
  core.counters.prefixCacheQueries += req.numTokens;
  core.counters.prefixCacheHits += lookup.numLocal;
  if (core.connector) {
    core.counters.externalPrefixCacheQueries += req.numTokens - lookup.numLocal;
    core.counters.externalPrefixCacheHits += lookup.numExternal;
  }
  if (req.numPreemptions === 0) {
    req.metrics.numLocalCachedTokens = lookup.numLocal;
    req.metrics.numExternalTokens = lookup.numExternal;
    req.metrics.externalCacheHitSources =
      core.connector && lookup.numExternal > 0
        ? core.connector.getExternalCacheHitSources(req, lookup.numExternal)
        : {};
  }
}

/**
 * vLLM's _update_waiting_for_remote_kv: once the workers reported the load finished, cache
 * what arrived (only now: no prefix hits on unloaded blocks), recompute the last token on
 * a full prompt hit, or (failed load, recompute policy) keep only the valid prefix.
 */
function promote(core: SchedulerCore, req: Request): boolean {
  const id = req.requestId;
  if (!core.finishedRecving.has(id)) return false;
  if (core.failedRecving.has(id)) {
    core.failedRecving.delete(id);
    if (req.numComputedTokens > 0) {
      core.kv.cacheBlocks(req, req.numComputedTokens);
      transition(req, 'LOADED');
    } else {
      core.kv.free(id);
      core.inflightPrefills.delete(req);
      transition(req, 'WAITING');
    }
  } else {
    core.kv.cacheBlocks(req, req.numComputedTokens);
  }
  // Full prompt hit: recompute the last token for its logits. (After a failure whose bad
  // block another request recomputes, the count can still be full: same rule.)
  if (req.numComputedTokens >= req.numTokens) req.numComputedTokens = req.numTokens - 1;
  core.finishedRecving.delete(id);
  req.status = req.numPreemptions > 0 ? 'PREEMPTED' : 'WAITING';
  return true;
}
