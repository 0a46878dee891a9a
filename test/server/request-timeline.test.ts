/**
 * Request timelines (src/server/request-timeline.ts): kept in development mode only, served by
 * X-Request-Id; a NIXL prefill/decode pair behind real servers records every event of one
 * disaggregated request in order (D: received → KV load started → finished → scheduled →
 * first token → first chunk → end), as `npm run bench -- pd-ttft` reads them.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { RequestOutputDelta } from '../../src/engine/api.ts';
import {
  type RequestTimeline,
  RequestTimelines,
  TimelineRecorder,
} from '../../src/server/request-timeline.ts';
import { type Served, serve, stop } from './helpers/served.ts';

function delta(
  tokens: number[],
  milestones: RequestOutputDelta['metrics']['milestones'],
): RequestOutputDelta {
  return {
    requestId: 'r',
    newTokenIds: tokens,
    newText: '',
    logprobs: null,
    topLogprobs: null,
    finished: false,
    finishReason: null,
    kvTransferParams: null,
    metrics: {
      arrivalTime: 0,
      queuedMs: 0,
      scheduledAt: null,
      numCachedTokens: 0,
      ttftMs: null,
      e2eMs: null,
      numPromptTokens: 3,
      numLocalComputedTokens: 0,
      numLocalCachedTokens: 0,
      numExternalTokens: 0,
      externalCacheHitSources: {},
      numGeneratedTokens: 0,
      ...(milestones ? { milestones } : {}),
    },
  };
}

describe('the timeline store', () => {
  test('keeps the last N by request id; a repeated id keeps the latest', () => {
    const store = new RequestTimelines(2);
    store.start('a', 1);
    store.start('b', 2);
    store.start('a', 3);
    store.start('c', 4);
    assert.equal(store.get('b'), undefined, 'the oldest is dropped');
    assert.equal(store.get('a')?.events.received, 3);
    assert.equal(store.get('c')?.events.received, 4);
  });

  test("a recorder takes the engine's milestones and stamps the first token once", () => {
    const r = new TimelineRecorder('r', 10);
    r.delta(delta([], { kvLoadStartedAt: 11, kvLoadFinishedAt: null, scheduledAt: null }));
    assert.equal(r.timeline.events.first_token, null, 'no token yet');
    r.delta(delta([5], { kvLoadStartedAt: 11, kvLoadFinishedAt: 12, scheduledAt: 13 }));
    const first = r.timeline.events.first_token;
    assert.ok(first !== null && first > 13);
    r.delta(delta([6], { kvLoadStartedAt: 11, kvLoadFinishedAt: 12, scheduledAt: 13 }));
    r.firstChunk();
    r.end();
    assert.deepEqual(
      { ...r.timeline.events, first_token: first, first_chunk: 0, response_end: 0 },
      {
        received: 10,
        kv_load_started: 11,
        kv_load_finished: 12,
        scheduled: 13,
        params_ahead: null,
        first_token: first,
        first_chunk: 0,
        response_end: 0,
      },
    );
    assert.ok((r.timeline.events.response_end ?? 0) >= (r.timeline.events.first_chunk ?? Infinity));
  });
});

describe('GET /kvconnect/timeline on a NIXL pair', () => {
  let prefill: Served;
  let decode: Served;
  let plain: Served;
  const nixl = (role: string) => ({
    num_gpu_blocks: 64,
    kv_transfer_config: {
      kv_connector: 'NixlConnector',
      kv_role: role,
      kv_connector_extra_config: { backends: ['TCP'], side_channel_port: 0 },
    },
  });
  before(async () => {
    prefill = await serve(nixl('kv_producer'), { devMode: true });
    decode = await serve(nixl('kv_consumer'), { devMode: true });
    plain = await serve({ num_gpu_blocks: 64 }, { devMode: false });
  });
  after(() => stop(prefill, decode, plain));

  const post = (url: string, id: string, body: unknown) =>
    fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-request-id': id },
      body: JSON.stringify(body),
    });
  const timeline = async (url: string, id: string): Promise<RequestTimeline> => {
    const res = await fetch(`${url}/kvconnect/timeline?request_id=${encodeURIComponent(id)}`);
    assert.equal(res.status, 200);
    return (await res.json()) as RequestTimeline;
  };
  const ordered = (events: Record<string, number | null>, keys: string[]): void => {
    const values = keys.map((k) => events[k]);
    for (const [i, v] of values.entries()) assert.equal(typeof v, 'number', `${keys[i]} recorded`);
    for (let i = 1; i < values.length; i++) {
      assert.ok(
        values[i]! >= values[i - 1]!,
        `${keys[i - 1]} (${values[i - 1]}) ≤ ${keys[i]} (${values[i]})`,
      );
    }
  };

  test('P and D record one disaggregated request, every event in order', async () => {
    const body = { model: 'tiny', prompt: 'timelines of one request', max_tokens: 3, temperature: 0 };
    const id = 'timeline-pd-1';
    const pRes = await post(prefill.url, id, {
      ...body,
      max_tokens: 1,
      kv_transfer_params: { do_remote_decode: true },
    });
    assert.equal(pRes.status, 200);
    const params = ((await pRes.json()) as { kv_transfer_params: unknown }).kv_transfer_params;
    const dRes = await post(decode.url, id, { ...body, stream: true, kv_transfer_params: params });
    assert.equal(dRes.status, 200);
    assert.match(await dRes.text(), /data: \[DONE\]/);

    const p = await timeline(prefill.url, id);
    assert.equal(p.request_id, id);
    ordered(p.events, ['received', 'scheduled', 'first_token', 'response_end']);
    assert.equal(p.events.kv_load_started, null, 'P loads nothing');
    assert.equal(p.events.first_chunk, null, "P's answer is not streamed");
    assert.equal(p.events.params_ahead, null, 'no 103 without x-kvconnect-params-ahead');

    const d = await timeline(decode.url, id);
    ordered(d.events, [
      'received',
      'kv_load_started',
      'kv_load_finished',
      'scheduled',
      'first_token',
      'first_chunk',
      'response_end',
    ]);
    assert.ok(d.events.received >= (p.events.response_end ?? Infinity), 'D was asked after P answered');
  });

  test('an unknown or missing request id is a 404 / 400; without dev mode there is no route', async () => {
    const unknown = await fetch(`${decode.url}/kvconnect/timeline?request_id=nope`);
    assert.equal(unknown.status, 404);
    const err = ((await unknown.json()) as { error: { kvconnect_code: string; param: string } }).error;
    assert.equal(err.kvconnect_code, 'SERVER_TIMELINE_NOT_FOUND');
    assert.equal(err.param, 'request_id');
    const missing = await fetch(`${decode.url}/kvconnect/timeline`);
    assert.equal(missing.status, 400);
    const off = await fetch(`${plain.url}/kvconnect/timeline?request_id=nope`);
    assert.equal(off.status, 404);
    assert.equal(
      ((await off.json()) as { error: { kvconnect_code: string } }).error.kvconnect_code,
      'SERVER_ROUTE_NOT_FOUND',
    );
  });
});
