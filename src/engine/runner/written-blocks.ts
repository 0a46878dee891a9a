/**
 * Which KV blocks a step gives to new content and which its forward pass fills: the model
 * runner tells the connector (KVConnectorBase.kvBlocksAllocated / kvBlocksFilled), so a
 * transfer agent records a block's checksum once, when its KV is final, instead of hashing
 * it at every WRITE or grant (docs/transfer.md#recorded-checksums).
 */
import type { SchedulerOutput } from '../../connector/types.ts';
import type { RunnerRequestState } from './request-states.ts';

/**
 * Blocks allocated to requests in this step (every block of a newly scheduled request, the
 * new blocks of a running one): their content is about to change, by the forward pass or by
 * a connector's load. A new request's prefix-cache hits are among them (forgetting what was
 * recorded of those costs a hash later, never a wrong checksum).
 */
export function allocatedBlockIds(out: SchedulerOutput): number[] {
  const ids: number[] = [];
  for (const req of out.scheduledNewReqs) for (const group of req.blockIds) ids.push(...group);
  for (const groups of out.scheduledCachedReqs.newBlockIds)
    if (groups) for (const group of groups) ids.push(...group);
  return ids;
}

/**
 * Blocks that this step's forward pass filled: the last slot of each was written in this
 * step (by every layer), so their KV stays as it is until they are allocated again.
 * `blockSizes` holds each KV cache group's block size.
 */
export function filledBlockIds(
  states: readonly RunnerRequestState[],
  blockSizes: readonly number[],
): number[] {
  const ids: number[] = [];
  for (const s of states) {
    if (s.numScheduledTokens <= 0) continue;
    const to = s.numComputedTokens + s.numScheduledTokens;
    s.blockTables.forEach((table, g) => {
      const bs = blockSizes[g] ?? blockSizes[0]!;
      // Block i is full once (i + 1) × bs tokens are in the cache; it was not before this step
      // for every i from the block holding the step's first token.
      const last = Math.min(Math.floor(to / bs), table.length);
      for (let i = Math.floor(s.numComputedTokens / bs); i < last; i++) ids.push(table[i]!);
    });
  }
  return ids;
}
