/**
 * A full KV pool, nothing running, a preempted request at the head of the queue that
 * cannot get its blocks back, and behind it requests whose async loads already finished
 * (they hold their blocks). Admitting strictly in order would wait for ever (the decode
 * engine of the soak test did); the loaded requests must run and free blocks, and then the
 * head gets its turn.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createHarness, tokens } from './helpers/harness.ts';

test('requests whose KV arrived run even when the head of the queue cannot get blocks', () => {
  const h = createHarness({ blockSize: 4, numBlocks: 9 });
  for (const id of ['r1', 'r2']) {
    h.connector.matches.set(id, (req, computed) => ({ count: req.numTokens - computed, loadAsync: true }));
  }
  const big = h.add('big', tokens(8, 100), { maxTokens: 24 });
  h.step(); // big prefills (2 blocks) and runs
  h.add('r1', tokens(8, 200), { maxTokens: 2 });
  h.add('r2', tokens(8, 300), { maxTokens: 2 });
  // big decodes until it needs a block the loads hold: it is preempted to the head of the queue.
  for (let i = 0; i < 40 && big.numPreemptions === 0; i++) h.step();
  assert.ok(big.numPreemptions > 0, 'big was preempted');
  assert.equal(h.scheduler.stats().numRunningReqs, 0, 'nothing runs');
  h.step({ finishedRecving: ['r1', 'r2'] });
  const finished = new Set<string>();
  for (let i = 0; i < 60 && finished.size < 3; i++) {
    for (const o of h.step().update.outputs) if (o.finished) finished.add(o.requestId);
  }
  assert.deepEqual([...finished].sort(), ['big', 'r1', 'r2'], 'the loaded requests ran, then big');
  assert.equal(h.scheduler.stats().kvCacheUsage, 0);
});
