/** D side: async loads parked in WAITING_FOR_REMOTE_KVS, promotion, reservation, aborts. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createHarness, tokens } from './helpers/harness.ts';

/** The connector answers "the whole prompt beyond the local hit, asynchronously". */
function remotePrefill(h: ReturnType<typeof createHarness>, id: string): void {
  h.connector.matches.set(id, (req, computed) => ({ count: req.numTokens - computed, loadAsync: true }));
}

test('remote prefill: WAITING_FOR_REMOTE_KVS → finished_recving → RUNNING, last token recomputed', () => {
  const h = createHarness();
  remotePrefill(h, 'd');
  const req = h.add('d', tokens(10), { maxTokens: 3 });
  const s1 = h.step();
  assert.equal(s1.out.totalNumScheduledTokens, 0);
  assert.equal(req.status, 'WAITING_FOR_REMOTE_KVS');
  assert.equal(req.lifecycle, 'WAITING_FOR_REMOTE_KV');
  const alloc = h.connector.callsOf('updateStateAfterAlloc', 'd');
  assert.equal(alloc.length, 1);
  assert.equal((alloc[0]?.detail as { numExternalTokens: number } | undefined)?.numExternalTokens, 10);
  assert.equal(h.kv.getBlockIds('d')[0]?.length, 3);

  // Not cached yet: an identical request gets no local hit against unloaded blocks.
  const probe = h.makeRequest('probe', tokens(10));
  assert.equal(h.kv.getComputedBlocks(probe).numComputedTokens, 0);

  const s2 = h.step();
  assert.equal(s2.out.totalNumScheduledTokens, 0, 'still waiting for the transfer');
  const s3 = h.step({ finishedRecving: ['d'] });
  assert.equal(req.lifecycle, 'LOADED');
  assert.equal(s3.out.totalNumScheduledTokens, 0);
  assert.equal(h.kv.getComputedBlocks(probe).numComputedTokens, 0, 'cached only at promotion');

  const s4 = h.step();
  // Promoted (and cached) at the start of this step: the probe hits the loaded full blocks.
  assert.equal(h.kv.getComputedBlocks(probe).numComputedTokens, 8);
  assert.deepEqual(s4.out.numScheduledTokens, { d: 1 }, 'full prompt hit recomputes only the last token');
  assert.equal(s4.out.scheduledNewReqs[0]?.numComputedTokens, 9);
  assert.equal(req.status, 'RUNNING');
  assert.equal(req.metrics.numExternalTokens, 10);
  assert.equal(req.metrics.numLocalComputedTokens, 1);
  assert.equal(s4.update.outputs[0]?.newTokenIds.length, 1);
  assert.ok(
    h.connector.callsOf('updateStateAfterAlloc', 'd').length >= 2,
    'called again when more blocks are allocated',
  );
});

test('remote prefill interleaves with normal requests; buildConnectorMeta runs every step', () => {
  const h = createHarness();
  remotePrefill(h, 'remote');
  h.add('remote', tokens(8), { maxTokens: 2 });
  h.add('local', tokens(5, 500), { maxTokens: 2 });
  const s1 = h.step();
  assert.deepEqual(s1.out.numScheduledTokens, { local: 5 });
  h.step();
  const s3 = h.step({ finishedRecving: ['remote'] });
  assert.deepEqual(Object.keys(s3.out.numScheduledTokens), []);
  const s4 = h.step();
  assert.deepEqual(s4.out.numScheduledTokens, { remote: 1 });
  assert.equal(h.connector.callsOf('buildConnectorMeta').length, 4);
});

test('a prompt of exactly one block loads and recomputes its last token', () => {
  const h = createHarness();
  remotePrefill(h, 'one');
  h.add('one', tokens(4), { maxTokens: 1 });
  h.step();
  h.step({ finishedRecving: ['one'] });
  const s = h.step();
  assert.deepEqual(s.out.numScheduledTokens, { one: 1 });
  assert.equal(s.update.outputs[0]?.finished, true);
});

test('null from getNumNewMatchedTokens = ask again next step, with no side effect', () => {
  const h = createHarness();
  let ready = false;
  h.connector.matches.set('r', (req, computed) =>
    ready ? { count: req.numTokens - computed, loadAsync: true } : { count: null, loadAsync: false },
  );
  const req = h.add('r', tokens(8));
  h.add('other', tokens(4, 600), { maxTokens: 1 });
  const s1 = h.step();
  assert.deepEqual(s1.out.numScheduledTokens, { other: 4 }, 'the request behind is not blocked');
  assert.equal(req.lifecycle, 'LOOKUP_PENDING');
  assert.equal(h.kv.getBlockIds('r')[0]?.length, 0);
  h.step();
  assert.equal(h.connector.callsOf('getNumNewMatchedTokens', 'r').length, 2);
  ready = true;
  h.step();
  assert.equal(req.status, 'WAITING_FOR_REMOTE_KVS');
});

test('cannot start a recv when blocks are insufficient; cannot schedule after recv when the pool is full', () => {
  // 9 usable blocks of 4 tokens.
  const h = createHarness({ numBlocks: 10 });
  h.add('hog', tokens(24, 700), { maxTokens: 30 });
  h.step();
  remotePrefill(h, 'd');
  h.add('d', tokens(16));
  h.step();
  assert.equal(h.scheduler.getRequest('d')?.status, 'WAITING', 'not admitted: 4 blocks needed, 3 free');
  assert.equal(h.kv.getBlockIds('d')[0]?.length, 0);
});

test('async-load reservation gate: a second load waits while the first still needs its blocks', () => {
  // 11 usable blocks; each request needs 5 blocks for 18 tokens (20 slots).
  const h = createHarness({ numBlocks: 12 });
  // Load only the first 8 tokens remotely: the rest (10 tokens, 3 blocks) is computed later.
  h.connector.matches.set('a', () => ({ count: 8, loadAsync: true }));
  h.connector.matches.set('b', () => ({ count: 8, loadAsync: true }));
  h.add('a', tokens(18), { maxTokens: 1 });
  h.add('b', tokens(18, 900), { maxTokens: 1 });
  h.step();
  assert.equal(h.scheduler.getRequest('a')?.status, 'WAITING_FOR_REMOTE_KVS');
  assert.equal(
    h.scheduler.getRequest('b')?.status,
    'WAITING_FOR_REMOTE_KVS',
    'both fit: 11 free - 2 for a >= 3 reserved for a + 2 for b',
  );
  const h2 = createHarness({ numBlocks: 7 });
  h2.connector.matches.set('a', () => ({ count: 8, loadAsync: true }));
  h2.connector.matches.set('b', () => ({ count: 8, loadAsync: true }));
  h2.add('a', tokens(18), { maxTokens: 3 });
  h2.add('b', tokens(18, 900), { maxTokens: 1 });
  h2.step();
  assert.equal(h2.scheduler.getRequest('a')?.status, 'WAITING_FOR_REMOTE_KVS');
  assert.equal(h2.scheduler.getRequest('b')?.status, 'WAITING', 'b would eat the 3 blocks a still needs');
  h2.step({ finishedRecving: ['a'] });
  h2.step();
  assert.equal(h2.scheduler.getRequest('a')?.status, 'RUNNING');
});

test('abort while loading holds the blocks until finished_recving, then frees them', () => {
  const h = createHarness();
  remotePrefill(h, 'd');
  h.add('d', tokens(12));
  h.step();
  const held = h.kv.getBlockIds('d')[0] ?? [];
  assert.equal(held.length, 3);
  const outputs = h.scheduler.finishRequests(['d'], 'FINISHED_ABORTED');
  assert.equal(outputs[0]?.finishReason, 'abort');
  const req = h.scheduler.getRequest('d');
  assert.equal(req?.lifecycle, 'HANDOFF_PENDING');
  assert.deepEqual(h.kv.getBlockIds('d')[0], held, 'a remote write may still land in these blocks');
  assert.ok(h.connector.methods('d').includes('requestFinished'));
  h.step();
  assert.equal(h.scheduler.hasRequests(), true, 'zombie keeps the engine stepping');
  h.step({ finishedRecving: ['d'] });
  assert.equal(h.scheduler.getRequest('d'), undefined);
  assert.equal(h.kv.usage, 0);
  assert.equal(h.scheduler.hasRequests(), false);
});

test('abort while loading: the optional reclaim deadline frees blocks when finished_recving never comes', () => {
  let now = 1_000;
  const h = createHarness({ schedulerOptions: { abortedLoadReclaimMs: 500, clock: () => now } });
  remotePrefill(h, 'd');
  h.add('d', tokens(12));
  h.step();
  h.scheduler.finishRequests(['d'], 'FINISHED_ABORTED');
  now += 499;
  h.step();
  assert.ok(h.kv.usage > 0);
  now += 1;
  h.step();
  assert.equal(h.kv.usage, 0);
  assert.equal(h.scheduler.getRequest('d'), undefined);
});

test('abort after finished_recving but before promotion frees immediately', () => {
  const h = createHarness();
  remotePrefill(h, 'd');
  h.add('d', tokens(12));
  h.step();
  h.step({ finishedRecving: ['d'] });
  h.scheduler.finishRequests(['d'], 'FINISHED_ABORTED');
  assert.equal(h.scheduler.getRequest('d'), undefined);
  assert.equal(h.kv.usage, 0);
});
