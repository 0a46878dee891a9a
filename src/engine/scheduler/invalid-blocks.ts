/**
 * Blocks whose load failed (docs/scheduler.md#load-failures-kv_load_failure_policy). Each
 * affected request is truncated to its first invalid block; a block shared with an earlier
 * request in the batch is recomputed by that request only. Then the policy decides: `fail`
 * ends the requests with an error (evicting poisoned sync-loaded blocks from the prefix
 * cache), `recompute` re-runs them from the truncated point (async loads are promoted with
 * the valid prefix only).
 *
 * Beyond vLLM: every KV cache group is checked (vLLM reads group 0 only); the truncation
 * point is the earliest over the groups.
 */
import { trimCachedTokens } from '../../connector/cache-hit-source.ts';
import { getLogger } from '../../logging/logger.ts';
import type { Request } from '../request.ts';
import { transition } from '../request-lifecycle.ts';
import type { SchedulerCore } from './core.ts';

const log = getLogger('kvconnect.engine.scheduler.invalid-blocks');

interface Truncation {
  affected: Request[];
  affectedTokens: number;
  blocksToEvict: Set<number>;
}

function truncateRequests(
  core: SchedulerCore,
  requests: readonly Request[],
  invalid: ReadonlySet<number>,
  numScheduledTokens: Readonly<Record<string, number>>,
  marked: Set<number>,
  evict: boolean,
): Truncation {
  const result: Truncation = { affected: [], affectedTokens: 0, blocksToEvict: new Set() };
  const groups = core.kv.kvCacheConfig.groups;
  for (const req of requests) {
    const computedBefore = req.numComputedTokens - (numScheduledTokens[req.requestId] ?? 0);
    let affected = false;
    let truncateAt: number | null = null;
    const evictFrom: Array<{ ids: number[]; from: number }> = [];
    core.kv.getBlockIds(req.requestId).forEach((ids, g) => {
      const blockSize = groups[g]?.spec.blockSize ?? core.options.blockSize;
      const numComputedBlocks = Math.ceil(computedBefore / blockSize);
      for (let idx = 0; idx < Math.min(numComputedBlocks, ids.length); idx++) {
        const id = ids[idx] as number;
        if (id === 0 || !invalid.has(id)) continue;
        affected = true;
        if (marked.has(id)) continue;
        marked.add(id);
        const tokens = idx * blockSize;
        truncateAt = truncateAt === null ? tokens : Math.min(truncateAt, tokens);
        evictFrom.push({ ids, from: idx });
        break;
      }
    });
    if (!affected) continue;
    const newComputed: number = truncateAt ?? computedBefore;
    req.numComputedTokens = newComputed;
    result.affected.push(req);
    result.affectedTokens += computedBefore - newComputed;
    if (truncateAt !== null && req.metrics.numExternalTokens > 0) {
      req.metrics.numExternalTokens = Math.max(0, newComputed - req.metrics.numLocalCachedTokens);
      req.metrics.externalCacheHitSources = trimCachedTokens(
        req.metrics.externalCacheHitSources,
        req.metrics.numExternalTokens,
      );
    }
    if (evict) for (const e of evictFrom) for (const id of e.ids.slice(e.from)) result.blocksToEvict.add(id);
  }
  return result;
}

/**
 * Returns the ids of the requests the caller must handle: under `fail` every affected
 * request (to finish with FINISHED_ERROR); under `recompute` the sync-loaded ones (whose
 * sampled tokens of this step are discarded).
 */
export function handleInvalidBlocks(
  core: SchedulerCore,
  invalid: ReadonlySet<number>,
  numScheduledTokens: Readonly<Record<string, number>>,
): Set<string> {
  const marked = new Set<number>();
  const asyncLoads = core.waiting.filter((r) => r.status === 'WAITING_FOR_REMOTE_KVS');
  const asyncResult = truncateRequests(core, asyncLoads, invalid, numScheduledTokens, marked, false);
  const syncResult = truncateRequests(core, core.running, invalid, numScheduledTokens, marked, true);
  const total = asyncResult.affected.length + syncResult.affected.length;
  if (total === 0) return new Set();
  const tokens = asyncResult.affectedTokens + syncResult.affectedTokens;
  if (core.options.kvLoadFailurePolicy === 'fail') {
    if (syncResult.blocksToEvict.size > 0) core.kv.evictBlocks(syncResult.blocksToEvict);
    const ids = [...asyncResult.affected, ...syncResult.affected].map((r) => r.requestId);
    log.error(
      'Failing %d request(s) due to KV load failure (failure_policy=fail, %d tokens affected). Request IDs: %s',
      total,
      tokens,
      ids.join(', '),
    );
    return new Set(ids);
  }
  log.warn('Recovered from KV load failure: %d request(s) rescheduled (%d tokens affected).', total, tokens);
  for (const req of asyncResult.affected) {
    core.failedRecving.add(req.requestId);
    if (req.lifecycle !== 'FAILED') transition(req, 'FAILED');
  }
  return new Set(syncResult.affected.map((r) => r.requestId));
}
