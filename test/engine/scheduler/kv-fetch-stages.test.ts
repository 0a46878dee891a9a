/**
 * vllm:num_requests_kv_fetch_by_stage as the scheduler counts it: a request that will fetch
 * its KV from a peer is `waiting_to_start` until it is admitted, `in_progress` while the
 * load runs, `completed_waiting` once finished_recving arrived and until it is scheduled.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createHarness, tokens } from './helpers/harness.ts';

test('kv fetch stages follow a remote prefill from waiting to running', () => {
  // Room for one request at a time, so the second one waits before its load starts.
  const h = createHarness({ numBlocks: 5 });
  const remote = { do_remote_prefill: true };
  for (const id of ['a', 'b'])
    h.connector.matches.set(id, (req, computed) => ({ count: req.numTokens - computed, loadAsync: true }));
  h.add('a', tokens(12), { maxTokens: 1, kvTransferParams: remote });
  h.add('b', tokens(12, 300), { maxTokens: 1, kvTransferParams: remote });
  const stages = () => h.scheduler.stats().kvFetchByStage;
  assert.deepEqual(stages(), { waiting_to_start: 2, in_progress: 0, completed_waiting: 0 });
  h.step();
  assert.deepEqual(stages(), { waiting_to_start: 1, in_progress: 1, completed_waiting: 0 });
  h.step({ finishedRecving: ['a'] });
  assert.deepEqual(stages(), { waiting_to_start: 1, in_progress: 0, completed_waiting: 1 });
  h.step();
  assert.equal(stages().completed_waiting, 0, 'a was promoted and scheduled');
});
