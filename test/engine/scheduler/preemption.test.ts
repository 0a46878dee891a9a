/** Recompute preemption under memory pressure; the partial-tail rule; the aggregator. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { emptyConnectorOutput } from '../../../src/connector/types.ts';
import { resolveExternalHit } from '../../../src/engine/scheduler/external-hit.ts';
import { KVOutputAggregator } from '../../../src/engine/scheduler/kv-output-aggregator.ts';
import { createHarness, drain, tokens } from './helpers/harness.ts';

function generate(numBlocks: number): {
  texts: Map<string, number[]>;
  preemptions: number;
  preemptedSeen: boolean;
} {
  const h = createHarness({ numBlocks, withConnector: false, enablePrefixCaching: false });
  for (const id of ['a', 'b', 'c']) h.add(id, tokens(6, id.charCodeAt(0) * 10), { maxTokens: 14 });
  const texts = new Map<string, number[]>();
  let preemptedSeen = false;
  for (let i = 0; i < 300 && h.scheduler.hasRequests(); i++) {
    const { out, update } = h.step();
    if (out.preemptedReqIds.length > 0) preemptedSeen = true;
    for (const o of update.outputs)
      texts.set(o.requestId, [...(texts.get(o.requestId) ?? []), ...o.newTokenIds]);
  }
  assert.equal(h.kv.usage, 0);
  return { texts, preemptions: h.scheduler.stats().numPreemptions, preemptedSeen };
}

test('preemption under memory pressure: outputs continue exactly as without pressure', () => {
  const roomy = generate(64);
  assert.equal(roomy.preemptions, 0);
  // 10 usable blocks; each request grows to 20 tokens = 5 blocks.
  const tight = generate(11);
  assert.ok(tight.preemptions > 0, 'the small pool forces preemption');
  assert.ok(tight.preemptedSeen, 'preempted ids reach the workers');
  assert.deepEqual(tight.texts, roomy.texts);
  for (const t of tight.texts.values()) assert.equal(t.length, 14);
});

test('a preempted request restarts from zero computed tokens at the front of the queue', () => {
  const h = createHarness({ numBlocks: 6, withConnector: false, enablePrefixCaching: false });
  const a = h.add('a', tokens(8), { maxTokens: 12 });
  const b = h.add('b', tokens(8, 500), { maxTokens: 12 });
  for (let i = 0; i < 40 && b.numPreemptions === 0 && a.numPreemptions === 0; i++) h.step();
  const victim = b.numPreemptions > 0 ? b : a;
  assert.equal(victim.status, 'PREEMPTED');
  assert.equal(victim.numComputedTokens, 0);
  assert.equal(h.scheduler.core.waiting[0], victim);
  drain(h);
  assert.equal(a.numOutputTokens, 12);
  assert.equal(b.numOutputTokens, 12);
});

test('partial-tail rule: a longer remote hit supersedes the local tail, a shorter one keeps it', () => {
  assert.deepEqual(resolveExternalHit(10, 4, 6, true), {
    numLocal: 8,
    numExternal: 6,
    loadAsync: true,
    dropLocalTail: true,
  });
  assert.deepEqual(resolveExternalHit(10, 4, 2, true), {
    numLocal: 10,
    numExternal: 0,
    loadAsync: false,
    dropLocalTail: false,
  });
  assert.deepEqual(resolveExternalHit(8, 4, 5, false), {
    numLocal: 8,
    numExternal: 5,
    loadAsync: false,
    dropLocalTail: false,
  });
  assert.deepEqual(resolveExternalHit(8, 4, 0, true), {
    numLocal: 8,
    numExternal: 0,
    loadAsync: false,
    dropLocalTail: false,
  });
});

test('KVOutputAggregator: finished only when every rank reported it, across steps; invalid blocks unioned', () => {
  const agg = new KVOutputAggregator(2);
  const r0 = {
    ...emptyConnectorOutput(),
    finishedSending: ['a', 'b'],
    invalidBlockIds: [3],
    kvConnectorStats: { bytes: 10 },
  };
  const r1 = {
    ...emptyConnectorOutput(),
    finishedSending: ['a'],
    invalidBlockIds: [5, 3],
    kvConnectorStats: { bytes: 7 },
  };
  const first = agg.aggregate([r0, r1]);
  assert.deepEqual(first.finishedSending, ['a']);
  assert.deepEqual(first.invalidBlockIds, [3, 5]);
  assert.deepEqual(first.kvConnectorStats, { bytes: 17 });
  const second = agg.aggregate([
    emptyConnectorOutput(),
    { ...emptyConnectorOutput(), finishedSending: ['b'] },
  ]);
  assert.deepEqual(second.finishedSending, ['b']);
  assert.equal(second.finishedRecving, null);
});

test('KVOutputAggregator: a dynamic expected count applies to new ids; in-flight ids keep their count', () => {
  const agg = new KVOutputAggregator(3);
  agg.aggregate([{ ...emptyConnectorOutput(), finishedRecving: ['req1'] }]);
  const changed = agg.aggregate([
    { ...emptyConnectorOutput(), expectedFinishedCount: 1, finishedRecving: ['req2'] },
  ]);
  assert.deepEqual(changed.finishedRecving, ['req2']);
  assert.equal(agg.expectedCount, 1);
  const one = agg.aggregate([{ ...emptyConnectorOutput(), finishedRecving: ['req1'] }]);
  assert.equal(one.finishedRecving, null, 'req1 still had 2 remaining, now 1');
  const two = agg.aggregate([{ ...emptyConnectorOutput(), finishedRecving: ['req1'] }]);
  assert.deepEqual(two.finishedRecving, ['req1']);
});
