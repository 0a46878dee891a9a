/** P side: requestFinished with delayed free until finished_sending. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createHarness, tokens } from './helpers/harness.ts';

function producer(h: ReturnType<typeof createHarness>, id: string): void {
  h.connector.delayFree.add(id);
  h.connector.finishParams.set(id, { do_remote_prefill: true, remote_request_id: id });
}

test('remote decode: finish → requestFinished(delay, params) → blocks freed only on finished_sending', () => {
  const h = createHarness();
  producer(h, 'p');
  h.add('p', tokens(10), { maxTokens: 1, kvTransferParams: { do_remote_decode: true } });
  const s1 = h.step();
  const final = s1.update.outputs[0];
  assert.equal(final?.finished, true);
  assert.deepEqual(final?.kvTransferParams, { do_remote_prefill: true, remote_request_id: 'p' });
  const finished = h.connector.callsOf('requestFinished', 'p');
  assert.equal(finished.length, 1);
  const blockIds = (finished[0]?.detail as { blockIds: number[][] } | undefined)?.blockIds ?? [];
  assert.equal(blockIds[0]?.length, 3, 'cdiv(10 computed tokens, 4)');
  assert.deepEqual(h.kv.getBlockIds('p'), blockIds);
  assert.equal(h.scheduler.getRequest('p')?.lifecycle, 'HANDOFF_PENDING');

  const s2 = h.step();
  assert.deepEqual(s2.out.finishedReqIds, ['p'], 'workers learn about the finish in the next step');
  assert.ok(h.kv.usage > 0);
  h.step({ finishedSending: ['p'] });
  assert.equal(h.kv.usage, 0);
  assert.equal(h.scheduler.getRequest('p'), undefined);
  // The connector saw updateConnectorOutput before the scheduler freed the blocks.
  const order = h.connector.methods();
  assert.ok(order.lastIndexOf('updateConnectorOutput') > order.indexOf('requestFinished'));
});

test('a prompt shorter than a block still hands over one block', () => {
  const h = createHarness();
  producer(h, 'short');
  h.add('short', tokens(3), { maxTokens: 1 });
  h.step();
  const detail = h.connector.callsOf('requestFinished', 'short')[0]?.detail as { blockIds: number[][] };
  assert.equal(detail.blockIds[0]?.length, 1);
});

test('a prefix-cache hit still yields params and holds the shared blocks', () => {
  const h = createHarness();
  h.add('warm', tokens(12), { maxTokens: 1 });
  h.step();
  h.step();
  producer(h, 'p');
  h.add('p', tokens(12), { maxTokens: 1 });
  const s = h.step();
  assert.equal(s.out.scheduledNewReqs[0]?.numComputedTokens, 8);
  assert.deepEqual(s.update.outputs[0]?.kvTransferParams, {
    do_remote_prefill: true,
    remote_request_id: 'p',
  });
  assert.equal(h.kv.getBlockIds('p')[0]?.length, 3);
});

test('abort during the transfer does not release the blocks until finished_sending', () => {
  const h = createHarness();
  producer(h, 'p');
  h.add('p', tokens(10), { maxTokens: 1 });
  h.step();
  const held = h.kv.getBlockIds('p');
  assert.deepEqual(h.scheduler.finishRequests(['p'], 'FINISHED_ABORTED'), []);
  h.step();
  assert.deepEqual(h.kv.getBlockIds('p'), held);
  assert.equal(h.scheduler.hasRequests(), true);
  h.step({ finishedSending: ['p'] });
  assert.equal(h.kv.usage, 0);
  assert.equal(h.scheduler.hasRequests(), false);
});

test('pending push work keeps the engine stepping with no request', () => {
  const h = createHarness();
  assert.equal(h.scheduler.hasRequests(), false);
  h.connector.pendingPushWork = true;
  assert.equal(h.scheduler.hasRequests(), true);
});

test('per step, the connector is called in vLLM order', () => {
  const h = createHarness();
  producer(h, 'p');
  h.add('p', tokens(6), { maxTokens: 1 });
  h.step({ finishedSending: [] });
  assert.deepEqual(h.connector.methods(), [
    'onNewRequest',
    'getNumNewMatchedTokens',
    'updateStateAfterAlloc',
    'buildConnectorMeta',
    'requestFinished',
    'updateConnectorOutput',
  ]);
});
