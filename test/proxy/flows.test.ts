import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { captureLogs, setLogLevel } from '../../src/logging/logger.ts';
import { type RunningProxy, resolveProxyOptions, startProxy } from '../../src/proxy/index.ts';
import type { ProxyOptions } from '../../src/proxy/types.ts';
import {
  decodeResponder,
  P_RETURNED_PARAMS,
  prefillResponder,
  UpstreamDouble,
} from './helpers/upstream-double.ts';

setLogLevel('silent');

async function pd(
  p: UpstreamDouble,
  d: UpstreamDouble,
  extra: Partial<ProxyOptions> = {},
): Promise<RunningProxy> {
  return startProxy(resolveProxyOptions({ prefill: [p.url], decode: [d.url], port: 0, ...extra }));
}

async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

const CLIENT_BODY = {
  model: 'tiny',
  prompt: 'hello world',
  max_tokens: 8,
  max_completion_tokens: 8,
  stream: true,
  stream_options: { include_usage: true },
  min_tokens: 2,
  temperature: 0,
};

describe('NIXL pull flow', () => {
  let p: UpstreamDouble;
  let d: UpstreamDouble;
  let proxy: RunningProxy;
  let logLines: string[];
  before(async () => {
    p = await UpstreamDouble.start(prefillResponder());
    d = await UpstreamDouble.start(decodeResponder(3, 120));
    const { result, records } = await captureLogs(() => pd(p, d));
    proxy = result;
    logLines = records.map((r) => r.message);
  });
  after(async () => {
    await proxy.close();
    await p.close();
    await d.close();
  });

  test('a backend without /kvconnect/info is treated as NixlConnector, with a log line', () => {
    assert.ok(
      logLines.some((l) => l.includes(p.url) && l.includes('assuming NixlConnector')),
      logLines.join('\n'),
    );
  });

  test('P gets do_remote_decode and max_tokens=1, D gets the original body plus P params, SSE streamed', async () => {
    const started = performance.now();
    const res = await post(`${proxy.url}/v1/completions`, CLIENT_BODY, { 'x-request-id': 'client-id-1' });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
    const reader = res.body!.getReader();
    const first = await reader.read();
    const firstAt = performance.now() - started;
    let text = Buffer.from(first.value!).toString();
    for (let r = await reader.read(); !r.done; r = await reader.read())
      text += Buffer.from(r.value).toString();
    const endAt = performance.now() - started;
    // The decode double needs 2 x 120 ms after its first chunk: a buffering proxy would deliver
    // everything at the end (a gap near 0). One late first delivery on a loaded machine still
    // leaves one gap of 120 ms, so the bound sits below that.
    assert.ok(endAt - firstAt >= 100, `first chunk at ${firstAt} ms, end at ${endAt} ms`);
    assert.match(text, /tok0[\s\S]*tok1[\s\S]*tok2[\s\S]*\[DONE\]/);

    const [pReq] = p.completions().slice(-1);
    const [dReq] = d.completions().slice(-1);
    assert.deepEqual(pReq!.body, {
      model: 'tiny',
      prompt: 'hello world',
      max_tokens: 1,
      max_completion_tokens: 1,
      stream: false,
      temperature: 0,
      return_token_ids: true,
      kv_transfer_params: {
        do_remote_decode: true,
        do_remote_prefill: false,
        remote_engine_id: null,
        remote_block_ids: null,
        remote_host: null,
        remote_port: null,
      },
    });
    // A resumable stream asks for token ids (docs/proxy.md#failover); P's leg is a copy.
    assert.deepEqual(dReq!.body, {
      ...CLIENT_BODY,
      return_token_ids: true,
      kv_transfer_params: P_RETURNED_PARAMS,
    });
    assert.equal(pReq!.headers['x-request-id'], 'client-id-1');
    assert.equal(dReq!.headers['x-request-id'], 'client-id-1');
    assert.ok(dReq!.at >= pReq!.at, 'D starts after P');
  });

  test('without a client X-Request-Id both legs share one fresh uuid; non-streaming passes JSON through', async () => {
    const res = await post(`${proxy.url}/v1/chat/completions`, {
      model: 'tiny',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 4,
    });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { id: 'cmpl-d', choices: [{ index: 0, text: 'decoded' }] });
    const pReq = p.completions().at(-1)!;
    const dReq = d.completions().at(-1)!;
    assert.equal(pReq.path, '/v1/chat/completions');
    assert.equal(dReq.path, '/v1/chat/completions');
    const id = pReq.headers['x-request-id'];
    assert.match(String(id), /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    assert.equal(dReq.headers['x-request-id'], id);
    assert.equal(res.headers.get('x-request-id'), id);
    assert.equal('max_completion_tokens' in pReq.body, false);
  });

  test('health, healthcheck and models', async () => {
    for (const path of ['/health', '/healthcheck']) {
      const res = await fetch(`${proxy.url}${path}`);
      assert.equal(res.status, 200);
      assert.deepEqual(await res.json(), { status: 'ok', prefill_instances: 1, decode_instances: 1 });
    }
    const models = await fetch(`${proxy.url}/v1/models`);
    assert.equal(((await models.json()) as { data: { id: string }[] }).data[0]!.id, 'tiny');
  });
});

describe('NIXL push flow', () => {
  test('D gets P side-channel coordinates and the shared request id, sent concurrently with P', async () => {
    const p = await UpstreamDouble.start(prefillResponder(300), {
      connector: 'NixlPushConnector',
      kv_role: 'kv_producer',
      engine_id: 'engine-p',
      side_channel_host: '10.0.0.7',
      side_channel_port: 5601,
      tp_size: 2,
      pp_size: 1,
    });
    const d = await UpstreamDouble.start(decodeResponder(2), {
      connector: 'NixlPushConnector',
      kv_role: 'kv_consumer',
    });
    const proxy = await pd(p, d);
    try {
      const res = await post(
        `${proxy.url}/v1/completions`,
        { ...CLIENT_BODY, stream: false },
        { 'x-request-id': 'rid-7' },
      );
      assert.equal(res.status, 200);
      await res.json();
      const pReq = p.completions()[0]!;
      const dReq = d.completions()[0]!;
      assert.deepEqual(pReq.body['kv_transfer_params'], {
        do_remote_decode: true,
        do_remote_prefill: false,
        remote_engine_id: null,
        remote_block_ids: null,
        remote_host: null,
        remote_port: null,
      });
      assert.equal(pReq.body['max_tokens'], 1);
      assert.deepEqual(dReq.body['kv_transfer_params'], {
        do_remote_decode: false,
        do_remote_prefill: true,
        remote_engine_id: 'engine-p',
        remote_host: '10.0.0.7',
        remote_port: 5601,
        tp_size: 2,
        pp_size: 1,
        remote_request_id: 'rid-7',
      });
      assert.equal(dReq.headers['x-request-id'], 'rid-7');
      assert.equal(dReq.body['max_tokens'], 8);
      assert.ok(Math.abs(dReq.at - pReq.at) < 200, `legs ${dReq.at - pReq.at} ms apart; P takes 300 ms`);
    } finally {
      await proxy.close();
      await p.close();
      await d.close();
    }
  });

  test('CLI coordinates override info; missing coordinates give a 500 with a hint', async () => {
    const p = await UpstreamDouble.start(prefillResponder(), null);
    const d = await UpstreamDouble.start(decodeResponder(1), null);
    const proxy = await pd(p, d, { kvConnector: 'NixlPushConnector' });
    const proxy2 = await pd(p, d, {
      kvConnector: 'NixlPushConnector',
      push: { engineId: 'e1', port: 7000, tpSize: 1, ppSize: 1 },
    });
    try {
      const bad = await post(`${proxy.url}/v1/completions`, { model: 'tiny', prompt: 'x', max_tokens: 2 });
      assert.equal(bad.status, 500);
      const err = (await bad.json()) as { error: { kvconnect_code: string; hint: string } };
      assert.equal(err.error.kvconnect_code, 'PROXY_PUSH_COORDINATES_MISSING');
      assert.match(err.error.hint, /--prefill-engine-id/);
      const ok = await post(`${proxy2.url}/v1/completions`, { model: 'tiny', prompt: 'x', max_tokens: 2 });
      assert.equal(ok.status, 200);
      await ok.json();
      const params = d.completions().at(-1)!.body['kv_transfer_params'] as Record<string, unknown>;
      assert.equal(params['remote_engine_id'], 'e1');
      assert.equal(params['remote_port'], 7000);
      assert.equal(params['remote_host'], '127.0.0.1');
    } finally {
      await proxy.close();
      await proxy2.close();
      await p.close();
      await d.close();
    }
  });
});

const REQUEST_ID_RE = /^___prefill_addr_(.+?)___decode_addr_(.+)_([0-9a-f]{32})$/;

describe('MoRIIO flows', () => {
  const pInfo = (mode: string) => ({
    connector: 'MoRIIOConnector',
    kv_role: 'kv_producer',
    zmq_address: 'host:10.0.0.1,handshake:6301,notify:61005',
    dp_size: 2,
    tp_size: 4,
    transfer_mode: mode,
  });
  const dInfo = {
    connector: 'MoRIIOConnector',
    kv_role: 'kv_consumer',
    zmq_address: 'host:10.0.0.2,handshake:6401,notify:62005',
    dp_size: 1,
    tp_size: 2,
  };

  test('READ: P first, then D with P engine id, block ids and transfer id; request id embedding', async () => {
    const pReturned = {
      remote_engine_id: '10.0.0.1:6301',
      remote_block_ids: [4, 5],
      transfer_id: 'ignored-will-copy',
    };
    const p = await UpstreamDouble.start(prefillResponder(100, pReturned), pInfo('READ'));
    const d = await UpstreamDouble.start(decodeResponder(2), dInfo);
    const proxy = await pd(p, d);
    try {
      const res = await post(`${proxy.url}/v1/completions`, {
        model: 'tiny',
        prompt: 'abc',
        max_tokens: 5,
        stream: true,
      });
      assert.equal(res.status, 200);
      await res.text();
      const pReq = p.completions()[0]!;
      const dReq = d.completions()[0]!;
      const pParams = pReq.body['kv_transfer_params'] as Record<string, unknown>;
      assert.match(String(pParams['transfer_id']), /^tx-[0-9a-f-]{36}$/);
      assert.deepEqual(pParams, {
        remote_dp_size: 1,
        remote_tp_size: 2,
        transfer_id: pParams['transfer_id'],
        do_remote_decode: true,
        do_remote_prefill: false,
        remote_engine_id: null,
        remote_block_ids: null,
      });
      assert.equal(pReq.body['stream'], false);
      assert.equal(pReq.body['max_tokens'], 1);
      const m = REQUEST_ID_RE.exec(String(pReq.headers['x-request-id']));
      assert.ok(m, String(pReq.headers['x-request-id']));
      assert.equal(m[1], pInfo('READ').zmq_address);
      assert.equal(m[2], dInfo.zmq_address);
      assert.equal(dReq.headers['x-request-id'], pReq.headers['x-request-id']);
      assert.equal(pReq.headers['x-data-parallel-rank'], '0');
      assert.deepEqual(dReq.body['kv_transfer_params'], {
        do_remote_decode: false,
        do_remote_prefill: true,
        remote_engine_id: '10.0.0.1:6301',
        remote_block_ids: [4, 5],
        transfer_id: 'ignored-will-copy',
        remote_dp_size: 2,
        remote_tp_size: 4,
        remote_dp_rank: 0,
      });
      assert.equal(dReq.body['max_tokens'], 5, 'kvconnect keeps max_tokens (token-identical outputs)');
      assert.ok(dReq.at - pReq.at >= 90, 'READ mode is sequential');
      // The next request uses P's second DP rank.
      await (
        await post(`${proxy.url}/v1/completions`, { model: 'tiny', prompt: 'abc', max_tokens: 5 })
      ).text();
      const p2 = p.completions()[1]!;
      assert.equal(p2.headers['x-data-parallel-rank'], '1');
      assert.equal(
        (d.completions()[1]!.body['kv_transfer_params'] as Record<string, unknown>)['remote_dp_rank'],
        1,
      );
    } finally {
      await proxy.close();
      await p.close();
      await d.close();
    }
  });

  test('WRITE: legs concurrent, D without P block ids; optional toy-proxy max_tokens decrement', async () => {
    const p = await UpstreamDouble.start(prefillResponder(300, {}), pInfo('WRITE'));
    const d = await UpstreamDouble.start(decodeResponder(2), dInfo);
    const proxy = await pd(p, d, { moriioDecrementMaxTokens: true });
    try {
      const res = await post(`${proxy.url}/v1/completions`, { model: 'tiny', prompt: 'abc', max_tokens: 5 });
      assert.equal(res.status, 200);
      await res.json();
      const pReq = p.completions()[0]!;
      const dReq = d.completions()[0]!;
      assert.ok(Math.abs(dReq.at - pReq.at) < 200, 'WRITE mode sends both legs at once');
      const dParams = dReq.body['kv_transfer_params'] as Record<string, unknown>;
      assert.equal(dParams['remote_block_ids'], null);
      assert.equal(dParams['remote_engine_id'], null);
      assert.equal(
        dParams['transfer_id'],
        (pReq.body['kv_transfer_params'] as Record<string, unknown>)['transfer_id'],
      );
      assert.equal(dReq.body['max_tokens'], 4);
    } finally {
      await proxy.close();
      await p.close();
      await d.close();
    }
  });
});
