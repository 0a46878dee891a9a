/**
 * The OffloadingConnector flow's exact parameters (docs/proxy.md#offloading-p2p-offloadingconnector--concurrent),
 * against recording backends: chosen from /kvconnect/info, P gets remote_decoder, D gets
 * remote_prefiller naming P's advertised p2p socket, both legs at once; the source header adds
 * remote_kv_source to P's leg; a backend without a p2p tier is refused with the fix.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { decodeResponder, UpstreamDouble, withProxy } from './helpers/upstream-double.ts';

setLogLevel('silent');

const INFO = { connector: 'OffloadingConnector', p2p_host: '10.0.0.7', p2p_port: 5712, p2p_base_port: 5712 };
const BODY = { model: 'tiny', prompt: 'hello world', max_tokens: 4, temperature: 0 };

async function post(url: string, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(BODY),
  });
}

const prefillOk = (_rec: unknown, res: import('node:http').ServerResponse) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ id: 'p', choices: [{ text: 'x', index: 0, finish_reason: 'length' }] }));
};

test("P gets remote_decoder, D remote_prefiller with P's p2p address, at once; the header adds a pull", async () => {
  const p = await UpstreamDouble.start(prefillOk, INFO);
  const d = await UpstreamDouble.start(decodeResponder(2), INFO);
  await withProxy([p], [d], {}, async (url) => {
    const res = await post(url, { 'x-request-id': 'req-1' });
    assert.equal(res.status, 200);
    await res.text();
    const [pLeg] = p.completions();
    const [dLeg] = d.completions();
    assert.deepEqual(pLeg!.body['kv_transfer_params'], { remote_decoder: { kv_request_id: 'req-1' } });
    assert.equal(pLeg!.body['max_tokens'], 1);
    assert.deepEqual(dLeg!.body['kv_transfer_params'], {
      remote_prefiller: { kv_request_id: 'req-1', remote_host: '10.0.0.7', remote_port: 5712 },
    });
    assert.equal(dLeg!.body['max_tokens'], 4);
    assert.ok(Math.abs(pLeg!.at - dLeg!.at) < 1000, 'both legs are sent at once');

    // The source header names D (a pool backend): P's leg also pulls from D's p2p socket.
    const res2 = await post(url, {
      'x-request-id': 'req-2',
      'x-kv-cache-source-host-port': new URL(d.url).host,
    });
    await res2.text();
    assert.deepEqual(p.completions()[1]!.body['kv_transfer_params'], {
      remote_decoder: { kv_request_id: 'req-2' },
      remote_kv_source: { kv_request_id: 'req-2-src', remote_host: '10.0.0.7', remote_port: 5712 },
    });
    // A malformed header is ignored.
    const res3 = await post(url, { 'x-request-id': 'req-3', 'x-kv-cache-source-host-port': 'no-port' });
    await res3.text();
    assert.deepEqual(p.completions()[2]!.body['kv_transfer_params'], {
      remote_decoder: { kv_request_id: 'req-3' },
    });
  });
});

test('an OffloadingConnector without a p2p tier is refused naming the fix; --p2p-connector-port supplies it', async () => {
  const bare = { connector: 'OffloadingConnector' };
  const p = await UpstreamDouble.start(prefillOk, bare);
  const d = await UpstreamDouble.start(decodeResponder(2), bare);
  await withProxy([p], [d], {}, async (url) => {
    const res = await post(url);
    assert.equal(res.status, 502);
    const err = (await res.json()) as { error: { kvconnect_code: string; message: string; hint: string } };
    assert.equal(err.error.kvconnect_code, 'PROXY_CONNECTOR_UNSUPPORTED');
    assert.match(err.error.message, /runs OffloadingConnector but advertises no p2p tier/);
    assert.match(err.error.hint, /--p2p-connector-port/);
  });
  const p2 = await UpstreamDouble.start(prefillOk, bare);
  const d2 = await UpstreamDouble.start(decodeResponder(2), bare);
  await withProxy([p2], [d2], { p2pConnectorPort: 7777 }, async (url) => {
    const res = await post(url, { 'x-request-id': 'req-4' });
    assert.equal(res.status, 200);
    await res.text();
    assert.deepEqual(d2.completions()[0]!.body['kv_transfer_params'], {
      remote_prefiller: { kv_request_id: 'req-4', remote_host: '127.0.0.1', remote_port: 7777 },
    });
  });
});

test('decode only: the source header gives the decode request remote_kv_source alone, if it has a p2p tier', async () => {
  // No prefill instance: a decode instance serves alone and pulls the prefix the named peer
  // (a pool backend, its advertised p2p socket) holds, as llm-d's sidecar sends a decoder-only
  // request.
  const d = await UpstreamDouble.start(decodeResponder(2), INFO);
  const source = await UpstreamDouble.start(decodeResponder(2), INFO);
  await withProxy([], [d, source], {}, async (url) => {
    const header = { 'x-kv-cache-source-host-port': new URL(source.url).host };
    const res = await post(url, { 'x-request-id': 'req-5', ...header });
    assert.equal(res.status, 200);
    await res.text();
    const [leg, ...others] = [...d.completions(), ...source.completions()];
    assert.equal(others.length, 0);
    assert.deepEqual(leg!.body['kv_transfer_params'], {
      remote_kv_source: { kv_request_id: 'req-5-src', remote_host: '10.0.0.7', remote_port: 5712 },
    });
    assert.equal(leg!.body['max_tokens'], 4);
  });
  // Without the header, or to a decode instance without a p2p tier, the request goes as the
  // client sent it.
  const bare = await UpstreamDouble.start(decodeResponder(2), { connector: 'OffloadingConnector' });
  const peer = await UpstreamDouble.start(decodeResponder(2), INFO);
  await withProxy([], [bare, peer], { policy: 'round_robin' }, async (url) => {
    for (const id of ['req-6', 'req-7', 'req-8']) {
      const headers: Record<string, string> = { 'x-request-id': id };
      if (id !== 'req-6') headers['x-kv-cache-source-host-port'] = new URL(peer.url).host;
      const res = await post(url, headers);
      assert.equal(res.status, 200);
      await res.text();
    }
    assert.ok(bare.completions().length >= 1);
    for (const leg of bare.completions()) assert.equal(leg.body['kv_transfer_params'], undefined);
  });
});
