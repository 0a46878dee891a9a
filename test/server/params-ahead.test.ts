/**
 * kv_transfer_params ahead through the server (docs/serve.md#kv_transfer_params-ahead): a
 * prefill request sent with `x-kvconnect-params-ahead: 1` gets a `103 Early Hints` whose
 * `x-kvconnect-kv-transfer-params` are its answer's, before the answer; without the header
 * (vLLM's clients) no 103 is sent and the answer is the same.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { request } from 'undici';
import type { AsyncEngineLike } from '../../src/engine/api.ts';
import { NIXL_PREFILL_REQUEST, PARAMS_AHEAD_HEADER, paramsAheadOf } from '../../src/wire/index.ts';
import { type Running, startEngine, startServer } from './helpers/harness.ts';

let engine: AsyncEngineLike;
let running: Running;

before(async () => {
  engine = await startEngine({
    kv_transfer_config: {
      kv_connector: 'NixlConnector',
      kv_role: 'kv_both',
      engine_id: `server-ahead-${process.pid}`,
      kv_connector_extra_config: { backends: ['TCP'], side_channel_port: 0 },
    },
  });
  running = await startServer({ engine });
});

after(async () => {
  await running?.close();
  await engine?.shutdown();
});

async function prefill(headers: Record<string, string>, id: string) {
  const infos: { statusCode: number; headers: Record<string, string | string[] | undefined>; at: number }[] =
    [];
  const res = await request(`${running.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-id': id, ...headers },
    body: JSON.stringify({
      prompt: 'in the beginning god created the heaven and the earth',
      max_tokens: 1,
      kv_transfer_params: { ...NIXL_PREFILL_REQUEST },
    }),
    onInfo: (info) => infos.push({ ...info, at: performance.now() }),
  });
  const headersAt = performance.now();
  const body = (await res.body.json()) as { kv_transfer_params: Record<string, unknown> };
  return { status: res.statusCode, body, infos, headersAt };
}

test('asked with the header, the params come ahead in a 103, equal to the answer’s', async () => {
  const r = await prefill({ [PARAMS_AHEAD_HEADER]: '1' }, 'ahead-1');
  assert.equal(r.status, 200);
  assert.equal(r.infos.length, 1);
  assert.equal(r.infos[0]!.statusCode, 103);
  assert.ok(r.infos[0]!.at <= r.headersAt);
  assert.deepEqual(paramsAheadOf(r.infos[0]!.headers), r.body.kv_transfer_params);
  assert.equal(r.body.kv_transfer_params['do_remote_prefill'], true);
});

test('without the header (vLLM’s clients) no 103 is sent', async () => {
  const r = await prefill({}, 'ahead-2');
  assert.equal(r.status, 200);
  assert.deepEqual(r.infos, []);
  assert.equal(r.body.kv_transfer_params['do_remote_prefill'], true);
});
