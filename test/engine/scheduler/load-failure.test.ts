/**
 * Invalid blocks under both kv_load_failure_policy values
 * (docs/scheduler.md#load-failures-kv_load_failure_policy).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { emptyConnectorOutput } from '../../../src/connector/types.ts';
import type { ModelRunnerOutput } from '../../../src/engine/runner-io.ts';
import { createHarness, tokens } from './helpers/harness.ts';

/** A step's runner output (no logprobs) whose connector reports `invalidBlockIds` as failed loads. */
function outputWithInvalidBlocks(
  reqIds: string[],
  sampledTokenIds: number[][],
  invalidBlockIds: number[],
): ModelRunnerOutput {
  return {
    reqIds,
    sampledTokenIds,
    logprobs: reqIds.map(() => null),
    topLogprobs: reqIds.map(() => null),
    kvConnectorOutput: { ...emptyConnectorOutput(), invalidBlockIds },
  };
}

test('async failure, recompute: truncated to the first invalid block, only the valid prefix is cached', () => {
  const h = createHarness({ policy: 'recompute' });
  h.connector.matches.set('d', (req, c) => ({ count: req.numTokens - c, loadAsync: true }));
  h.connector.matches.set('ok', (req, c) => ({ count: req.numTokens - c, loadAsync: true }));
  const d = h.add('d', tokens(12), { maxTokens: 2 });
  const ok = h.add('ok', tokens(12, 300), { maxTokens: 2 });
  h.step();
  const bad = h.kv.getBlockIds('d')[0]?.[1] as number;
  h.step({ invalidBlockIds: [bad] });
  assert.equal(d.numComputedTokens, 4);
  assert.equal(d.lifecycle, 'FAILED');
  assert.equal(ok.numComputedTokens, 12, 'other loads are unaffected');
  h.step({ finishedRecving: ['d', 'ok'] });
  const s = h.step();
  assert.equal(s.out.numScheduledTokens.d, 8, 'recomputes from the first invalid block');
  assert.equal(s.out.numScheduledTokens.ok, 1);
  assert.equal(d.metrics.numExternalTokens, 4);
  const probe = h.makeRequest('probe', tokens(12));
  assert.equal(
    h.kv.getComputedBlocks(probe).numComputedTokens,
    8,
    'the recomputed blocks are cached again after the step',
  );
});

test('progressive async failures across steps keep the earliest truncation', () => {
  const h = createHarness({ policy: 'recompute' });
  h.connector.matches.set('d', (req, c) => ({ count: req.numTokens - c, loadAsync: true }));
  const d = h.add('d', tokens(16), { maxTokens: 1 });
  h.step();
  const ids = h.kv.getBlockIds('d')[0] ?? [];
  h.step({ invalidBlockIds: [ids[2] as number] });
  assert.equal(d.numComputedTokens, 8);
  h.step({ invalidBlockIds: [ids[1] as number], finishedRecving: ['d'] });
  assert.equal(d.numComputedTokens, 4);
  const s = h.step();
  assert.equal(s.out.numScheduledTokens.d, 12);
});

test('async failure, fail policy: FINISHED_ERROR with a readable error; blocks held until finished_recving', () => {
  const h = createHarness({ policy: 'fail' });
  h.connector.matches.set('d', (req, c) => ({ count: req.numTokens - c, loadAsync: true }));
  h.add('d', tokens(12));
  h.step();
  const bad = h.kv.getBlockIds('d')[0]?.[0] as number;
  const s = h.step({ invalidBlockIds: [bad] });
  const out = s.update.outputs.find((o) => o.requestId === 'd');
  assert.equal(out?.finishReason, 'error');
  assert.equal(out?.status, 'FINISHED_ERROR');
  assert.equal(out?.error?.code, 'KV_LOAD_FAILED');
  assert.match(out?.error?.message ?? '', /kv_load_failure_policy=fail/);
  assert.ok(h.kv.usage > 0);
  h.step({ finishedRecving: ['d'] });
  assert.equal(h.kv.usage, 0);
});

test('sync failure, recompute: the running request rolls back and recomputes; the sampled token is dropped', () => {
  const h = createHarness({ policy: 'recompute' });
  h.connector.matches.set('s', () => ({ count: 8, loadAsync: false }));
  const req = h.add('s', tokens(10), { maxTokens: 2 });
  const s1 = h.scheduler.schedule();
  assert.equal(s1.numScheduledTokens.s, 2);
  const bad = h.kv.getBlockIds('s')[0]?.[1] as number;
  const update = h.scheduler.updateFromOutput(s1, outputWithInvalidBlocks(['s'], [[42]], [bad]));
  assert.deepEqual(update.outputs, []);
  assert.equal(req.numOutputTokens, 0);
  assert.equal(req.numComputedTokens, 4);
  const s2 = h.step();
  assert.equal(s2.out.numScheduledTokens.s, 6);
  assert.equal(s2.update.outputs[0]?.newTokenIds.length, 1);
});

test('sync failure with a block shared between requests: the first recomputes it, the others keep it', () => {
  const h = createHarness({ policy: 'recompute' });
  h.connector.matches.set('a', () => ({ count: 8, loadAsync: false }));
  const a = h.add('a', tokens(10), { maxTokens: 2 });
  const b = h.add('b', [...tokens(8), 7, 7], { maxTokens: 2 });
  const out = h.scheduler.schedule();
  assert.equal(out.scheduledNewReqs[1]?.numComputedTokens, 8, 'b hits the blocks a loads this step');
  const shared = h.kv.getBlockIds('a')[0]?.[1] as number;
  assert.equal(h.kv.getBlockIds('b')[0]?.[1], shared);
  h.scheduler.updateFromOutput(out, outputWithInvalidBlocks(['a', 'b'], [[1], [1]], [shared]));
  assert.equal(a.numComputedTokens, 4);
  assert.equal(b.numComputedTokens, 8);
});

test('sync failure, fail policy: both requests error and poisoned blocks leave the prefix cache', () => {
  const h = createHarness({ policy: 'fail' });
  h.connector.matches.set('a', () => ({ count: 8, loadAsync: false }));
  h.add('a', tokens(10), { maxTokens: 2 });
  const out = h.scheduler.schedule();
  const bad = h.kv.getBlockIds('a')[0]?.[1] as number;
  const update = h.scheduler.updateFromOutput(out, outputWithInvalidBlocks(['a'], [[1]], [bad]));
  assert.equal(update.outputs[0]?.status, 'FINISHED_ERROR');
  assert.equal(h.kv.usage, 0);
  const probe = h.makeRequest('probe', tokens(10));
  assert.equal(
    h.kv.getComputedBlocks(probe).numComputedTokens,
    4,
    'the first (valid) block still hits; the bad one does not',
  );
});
