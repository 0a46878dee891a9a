import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { describe, it } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import {
  ConversationKvCache,
  KvParamsTap,
  takeConversationId,
  turnPrefillParams,
} from '../../src/proxy/conversation-cache.ts';
import {
  P_RETURNED_PARAMS,
  prefillResponder,
  type Received,
  sleep,
  UpstreamDouble,
  withProxy,
} from './helpers/upstream-double.ts';

setLogLevel('silent');

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
    tap.chunk(Buffer.from(stream.slice(0, cut)));
    assert.equal(seen.length, 1, 'an incomplete event is held');
    tap.chunk(Buffer.from(stream.slice(cut)));
    assert.deepEqual(seen, [D_PARAMS, D_PARAMS]);
    tap.event('{"choices":[{"text":"b"}]}');
    tap.event('[DONE]');
    tap.event(JSON.stringify({ choices: [], kv_transfer_params: D_PARAMS }));
    assert.deepEqual(seen, [D_PARAMS, D_PARAMS, D_PARAMS], "a split stream's events are read one by one");
  });

  for (const streamResume of [true, false]) {
    it(`a streamed turn's params reach the next turn's prefill, its last event cut across writes (${streamResume ? 'spliced' : 'passed through'})`, async () => {
      /** D streams a token, then its final event in two writes with a pause between. */
      const decode = async (rec: Received, res: ServerResponse) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const ids = { token_ids: [7], ...(rec.body['return_token_ids'] ? { prompt_token_ids: [1, 2] } : {}) };
        res.write(
          `data: ${JSON.stringify({ id: 'cmpl-d', choices: [{ index: 0, text: 'a', ...ids }] })}\n\n`,
        );
        const last = `data: ${JSON.stringify({
          id: 'cmpl-d',
          choices: [{ index: 0, text: 'b', token_ids: [8], finish_reason: 'length' }],
          kv_transfer_params: D_PARAMS,
        })}\n\n`;
        const cut = last.indexOf('remote_block_ids');
        res.write(last.slice(0, cut));
        await sleep(30);
        res.write(last.slice(cut));
        res.end('data: [DONE]\n\n');
      };
      const p = await UpstreamDouble.start(prefillResponder());
      const d = await UpstreamDouble.start(decode);
      await withProxy([p], [d], { streamResume }, async (url) => {
        const send = async () => {
          const res = await fetch(`${url}/v1/completions`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({
              model: 'tiny',
              prompt: 'hi',
              max_tokens: 2,
              stream: true,
              conversation_id: 'c',
            }),
          });
          const text = await res.text();
          assert.equal(res.status, 200, text);
          assert.ok(text.includes('remote_request_id') && text.endsWith('data: [DONE]\n\n'), text);
        };
        await send();
        await send();
        const second = p.completions()[1]?.body['kv_transfer_params'];
        assert.deepEqual(
          second,
          turnPrefillParams(D_PARAMS),
          "the second turn's prefill READs D's kept blocks",
        );
        assert.notDeepEqual(second, P_RETURNED_PARAMS);
      });
    });
  }
});
