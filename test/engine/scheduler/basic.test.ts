import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertInvariants } from '../../../src/engine/request-lifecycle.ts';
import { createHarness, drain, EOS, nextToken, tokens } from './helpers/harness.ts';

test('a request runs prefill then decodes until max tokens, and its blocks return to the pool', () => {
  const h = createHarness({ withConnector: false });
  h.add('a', tokens(10), { maxTokens: 3 });
  const first = h.step();
  assert.deepEqual(first.out.numScheduledTokens, { a: 10 });
  assert.equal(first.out.scheduledNewReqs[0]?.blockIds[0]?.length, 3);
  const outputs = [...first.update.outputs];
  while (!outputs.at(-1)?.finished) outputs.push(...h.step().update.outputs);
  const generated = outputs.flatMap((o) => o.newTokenIds);
  const expected: number[] = [];
  const seq = tokens(10);
  for (let i = 0; i < 3; i++) {
    const t = nextToken(seq);
    expected.push(t);
    seq.push(t);
  }
  assert.deepEqual(generated, expected);
  const last = outputs.at(-1);
  assert.equal(last?.finished, true);
  assert.equal(last?.finishReason, 'length');
  assert.equal(h.kv.usage, 0);
  assert.equal(h.scheduler.hasRequests(), true, 'finished ids still go to the workers once');
  h.step();
  assert.equal(h.scheduler.hasRequests(), false);
});

test('EOS stops unless ignoreEos; stop token ids stop and are reported', () => {
  const h = createHarness({ withConnector: false });
  const req = h.makeRequest('eos', tokens(4), { ignoreEos: false, maxTokens: 10 });
  req.appendOutputToken(EOS);
  assert.equal(req.checkStop(128), 'FINISHED_STOPPED');
  const ignoring = h.makeRequest('ign', tokens(4), { ignoreEos: true, maxTokens: 10 });
  ignoring.appendOutputToken(EOS);
  assert.equal(ignoring.checkStop(128), null);
  const stopper = h.makeRequest('st', tokens(4), { stopTokenIds: [55], maxTokens: 10 });
  stopper.appendOutputToken(55);
  assert.equal(stopper.checkStop(128), 'FINISHED_STOPPED');
  assert.equal(stopper.stopTokenId, 55);
  const longOne = h.makeRequest('len', tokens(8), { maxTokens: 100 });
  longOne.appendOutputToken(11);
  assert.equal(longOne.checkStop(9), 'FINISHED_LENGTH_CAPPED');
});

test('chunked prefill never exceeds max batched tokens and decodes go first', () => {
  const h = createHarness({ withConnector: false, maxNumBatchedTokens: 8 });
  h.add('long', tokens(21), { maxTokens: 2 });
  h.add('other', tokens(5, 300), { maxTokens: 2 });
  const seen: Array<Record<string, number>> = [];
  for (let i = 0; i < 20 && h.scheduler.hasRequests(); i++) {
    const { out } = h.step();
    assert.ok(out.totalNumScheduledTokens <= 8);
    seen.push(out.numScheduledTokens);
  }
  assert.deepEqual(seen[0], { long: 8 });
  assert.deepEqual(seen[1], { long: 8 });
  assert.deepEqual(seen[2], { long: 5, other: 3 });
  assert.equal(h.kv.usage, 0);
});

test('without chunked prefill a prompt larger than the budget waits instead of being split', () => {
  const h = createHarness({
    withConnector: false,
    maxModelLen: 8,
    maxNumBatchedTokens: 8,
    enableChunkedPrefill: false,
  });
  h.add('a', tokens(6), { maxTokens: 4 });
  h.add('b', tokens(6, 400), { maxTokens: 1 });
  const first = h.step();
  assert.deepEqual(first.out.numScheduledTokens, { a: 6 });
  const second = h.step();
  assert.deepEqual(second.out.numScheduledTokens, { a: 1, b: 6 });
});

test('max_num_seqs bounds the running batch', () => {
  const h = createHarness({ withConnector: false, maxNumSeqs: 2 });
  for (const id of ['a', 'b', 'c']) h.add(id, tokens(4, id.charCodeAt(0)), { maxTokens: 2 });
  const { out } = h.step();
  assert.deepEqual(Object.keys(out.numScheduledTokens), ['a', 'b']);
  assert.equal(h.scheduler.stats().numWaitingReqs, 1);
});

test('a local prefix hit is block aligned, counted, and the consumer computes only the suffix', () => {
  const h = createHarness({ withConnector: false });
  h.add('first', tokens(13), { maxTokens: 1 });
  drain(h);
  const second = h.add('second', tokens(13), { maxTokens: 1 });
  const { out } = h.step();
  assert.deepEqual(out.numScheduledTokens, { second: 1 });
  assert.equal(out.scheduledNewReqs[0]?.numComputedTokens, 12);
  assert.equal(second.metrics.numLocalCachedTokens, 12);
  assert.equal(second.metrics.numLocalComputedTokens, 1);
  const stats = h.scheduler.stats();
  assert.equal(stats.prefixCacheQueries, 26);
  assert.equal(stats.prefixCacheHits, 12);
});

test('a plugin connector sees the block hashes of the request (3 for 48 tokens at block size 16)', () => {
  const h = createHarness({ blockSize: 16, numBlocks: 16 });
  let seen = -1;
  h.connector.matches.set('r', (req) => {
    seen = req.blockHashes.length;
    return { count: 0, loadAsync: false };
  });
  h.add('r', tokens(48), { maxTokens: 1 });
  h.step();
  assert.equal(seen, 3);
  assertInvariants(h.scheduler);
});

test('duplicate ids and empty prompts are rejected with a KVError', () => {
  const h = createHarness({ withConnector: false });
  h.add('x', tokens(3));
  assert.throws(() => h.add('x', tokens(3)), { code: 'KV_REQUEST_DUPLICATE' });
  assert.throws(() => h.add('y', []), { code: 'KV_REQUEST_INVALID_LENGTH' });
});
