/**
 * Write tracking in the model runner (written-blocks.ts): which blocks a step gives to new
 * content and which its forward pass fills, for chunked prefills, decode steps crossing a
 * block boundary and KV cache groups of different block sizes.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { SchedulerOutput } from '../../../src/connector/types.ts';
import type { RunnerRequestState } from '../../../src/engine/runner/request-states.ts';
import { allocatedBlockIds, filledBlockIds } from '../../../src/engine/runner/written-blocks.ts';

function state(
  numComputedTokens: number,
  numScheduledTokens: number,
  blockTables: number[][],
): RunnerRequestState {
  return {
    reqId: 'r',
    tokenIds: [],
    blockTables,
    numComputedTokens,
    numScheduledTokens,
    sampling: {} as RunnerRequestState['sampling'],
    sampledInLastStep: false,
    numPromptTokens: 0,
    promptLogprobs: null,
  };
}

describe('written blocks', () => {
  it('a block is filled by the step that writes its last slot, once', () => {
    const table = [[7, 8, 9, 10]];
    // 40 prompt tokens in chunks of 24 and 16 (block size 16): blocks 0 and 1, then none (block 2 is partial).
    assert.deepEqual(filledBlockIds([state(0, 24, table)], [16]), [7]);
    assert.deepEqual(filledBlockIds([state(24, 16, table)], [16]), [8]);
    // Decode steps: token 47 fills block 2, token 48 starts block 3.
    assert.deepEqual(filledBlockIds([state(46, 1, table)], [16]), []);
    assert.deepEqual(filledBlockIds([state(47, 1, table)], [16]), [9]);
    assert.deepEqual(filledBlockIds([state(48, 1, table)], [16]), []);
    // Exactly two blocks of prompt in one step.
    assert.deepEqual(filledBlockIds([state(0, 32, table)], [16]), [7, 8]);
    // Nothing scheduled: nothing written.
    assert.deepEqual(filledBlockIds([state(0, 0, table)], [16]), []);
  });

  it('takes each group with its own block size, and several requests at once', () => {
    const a = state(0, 33, [
      [1, 2, 3],
      [11, 12, 13, 14, 15],
    ]);
    const b = state(8, 8, [[4], [21, 22]]);
    assert.deepEqual(filledBlockIds([a, b], [16, 8]), [1, 2, 11, 12, 13, 14, 4, 22]);
  });

  it('lists every block of a new request and the new blocks of running ones', () => {
    const out = {
      scheduledNewReqs: [{ reqId: 'n', promptTokenIds: [], blockIds: [[1, 2], [9]], numComputedTokens: 0 }],
      scheduledCachedReqs: {
        reqIds: ['a', 'b'],
        resumedFromPreemption: [false, false],
        newBlockIds: [null, [[5], []]],
        newTokenIds: [[], []],
        numComputedTokens: [16, 32],
      },
    } as unknown as SchedulerOutput;
    assert.deepEqual(allocatedBlockIds(out), [1, 2, 9, 5]);
  });
});
