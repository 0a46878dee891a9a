/**
 * RequestMetrics.milestones (the wall-clock times request timelines read) exist only for a
 * request added with recordMilestones, as a server keeping timelines adds them; then the
 * scheduling milestone is stamped.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { RequestOutputDelta } from '../../src/engine/api.ts';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { samplingParams } from '../../src/engine/llm.ts';

let engine: AsyncEngine;
before(async () => {
  engine = await AsyncEngine.create({ model: 'tiny', num_gpu_blocks: 16, max_model_len: 64 });
});
after(() => engine?.shutdown());

async function last(requestId: string, recordMilestones: boolean): Promise<RequestOutputDelta> {
  let final: RequestOutputDelta | null = null;
  for await (const d of engine.generate({
    requestId,
    promptTokenIds: [5, 6, 7, 8],
    sampling: samplingParams({ temperature: 0, maxTokens: 2 }),
    recordMilestones,
  }))
    final = d;
  assert.ok(final?.finished);
  return final;
}

test('without recordMilestones a request has no milestones', async () => {
  assert.equal((await last('no-milestones', false)).metrics.milestones, undefined);
});

test('with recordMilestones its scheduling is stamped on the wall clock', async () => {
  const before = performance.timeOrigin + performance.now();
  const m = (await last('milestones', true)).metrics.milestones;
  assert.ok(m, 'milestones recorded');
  assert.ok(m.scheduledAt !== null && m.scheduledAt >= before);
  assert.equal(m.kvLoadStartedAt, null, 'no remote load');
});
