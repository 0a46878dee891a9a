import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  ConversationKvCache,
  KvParamsTap,
  takeConversationId,
  turnPrefillParams,
} from '../../src/proxy/conversation-cache.ts';

const D_PARAMS = {
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_request_id: 'r1',
  remote_block_ids: [[1, 2]],
};

describe('multi-turn conversation cache (NIXL bidirectional)', () => {
  it('conversation_id is taken out of the body; only a non-empty string counts', () => {
    const body: Record<string, unknown> = { prompt: 'x', conversation_id: 'c1' };
    assert.equal(takeConversationId(body), 'c1');
    assert.deepEqual(body, { prompt: 'x' }, 'not forwarded to the engines');
    for (const v of ['', 7, null]) assert.equal(takeConversationId({ conversation_id: v }), null);
  });

  it("an entry is D's do_remote_decode params, used once, dropped after the TTL, bounded in number", () => {
    const cache = new ConversationKvCache(1000, 2);
    cache.put('a', { do_remote_prefill: true });
    assert.equal(cache.size, 0, "P's answer is not a decode cache entry");
    cache.put('a', D_PARAMS, 0);
    assert.deepEqual(cache.take('a', 500), D_PARAMS);
    assert.equal(cache.take('a', 500), null, 'single use');
    cache.put('b', D_PARAMS, 0);
    assert.equal(cache.take('b', 1001), null, 'stale');
    for (const id of ['x', 'y', 'z']) cache.put(id, D_PARAMS, 0);
    assert.equal(cache.size, 2);
    assert.equal(cache.take('x', 0), null, 'the oldest went first');
    assert.deepEqual(turnPrefillParams({ ...D_PARAMS, do_remote_prefill: true }), D_PARAMS);
  });

  it('reads kv_transfer_params from a JSON answer and from SSE events split anywhere', () => {
    const seen: unknown[] = [];
    const tap = new KvParamsTap((p) => seen.push(p));
    tap.whole(Buffer.from(JSON.stringify({ choices: [], kv_transfer_params: D_PARAMS })));
    const stream = `data: {"choices":[{"text":"a"}]}\n\ndata: ${JSON.stringify({ choices: [], kv_transfer_params: D_PARAMS })}\n\ndata: [DONE]\n\n`;
    const cut = stream.indexOf('remote_request_id');
    tap.chunk(stream.slice(0, cut));
    assert.equal(seen.length, 1, 'an incomplete event is held');
    tap.chunk(Buffer.from(stream.slice(cut)));
    assert.deepEqual(seen, [D_PARAMS, D_PARAMS]);
  });
});
