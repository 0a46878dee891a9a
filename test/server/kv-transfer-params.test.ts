/**
 * kv_transfer_params through the server with a real (external) connector: accepted in the
 * body, returned in non-streaming responses and in the final streaming chunk; a rejected
 * do_remote_prefill request still reaches the connector
 * (docs/scheduler.md#delayed-free-and-aborts); connector stats reach /metrics through the
 * metrics its class declares; /kvconnect/info names the connector.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { AsyncEngineLike } from '../../src/engine/api.ts';
import { finishedRecords } from './fixtures/echo-connector.ts';
import { metricValue, postJson, type Running, startEngine, startServer, waitFor } from './helpers/harness.ts';

let engine: AsyncEngineLike;
let running: Running;

before(async () => {
  engine = await startEngine({
    kv_transfer_config: {
      kv_connector: 'EchoParamsConnector',
      kv_role: 'kv_both',
      engine_id: 'engine-under-test',
      kv_connector_module_path: fileURLToPath(new URL('./fixtures/echo-connector.ts', import.meta.url)),
    },
  });
  running = await startServer({ engine });
});

after(async () => {
  await running?.close();
  await engine?.shutdown();
});

test("non-streaming responses return the connector's kv_transfer_params", async () => {
  const sent = { do_remote_decode: true, do_remote_prefill: false, note: 'pass-through' };
  const res = await postJson(
    `${running.url}/v1/completions`,
    { prompt: 'prefill me', max_tokens: 1, kv_transfer_params: sent },
    { 'X-Request-Id': 'pd-1' },
  );
  assert.equal(res.status, 200);
  const body = (await res.json()) as { kv_transfer_params: Record<string, unknown> };
  assert.match(String(body.kv_transfer_params['echo_request_id']), /^cmpl-pd-1-[0-9a-f]{8}$/);
  assert.deepEqual(body.kv_transfer_params['received'], sent);
  assert.equal(body.kv_transfer_params['num_prompt_tokens'], engine.tokenizer.encode('prefill me').length);
});

test('streaming returns kv_transfer_params on the final chunk only (chat)', async () => {
  const res = await postJson(`${running.url}/v1/chat/completions`, {
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 3,
    ignore_eos: true,
    stream: true,
    kv_transfer_params: { do_remote_decode: true },
  });
  const events = (await res.text())
    .split('\n\n')
    .filter((e) => e.startsWith('data: '))
    .map((e) => e.slice(6));
  assert.equal(events.at(-1), '[DONE]');
  const chunks = events.slice(0, -1).map(
    (e) =>
      JSON.parse(e) as {
        kv_transfer_params?: Record<string, unknown>;
        choices: Array<{ finish_reason: string | null }>;
      },
  );
  const withParams = chunks.filter((c) => c.kv_transfer_params !== undefined);
  assert.equal(withParams.length, 1);
  assert.equal(withParams[0], chunks.at(-1));
  assert.equal(withParams[0]?.choices[0]?.finish_reason, 'length');
  assert.deepEqual(withParams[0]?.kv_transfer_params?.['received'], { do_remote_decode: true });
});

test('a request rejected before admission with do_remote_prefill still reaches the connector', async () => {
  const params = {
    do_remote_prefill: true,
    remote_engine_id: 'prefill-7',
    remote_block_ids: [3, 4],
    remote_host: '127.0.0.1',
    remote_port: 5601,
  };
  const res = await postJson(
    `${running.url}/v1/completions`,
    { prompt: 'x'.repeat(5000), max_tokens: 1, kv_transfer_params: params },
    { 'X-Request-Id': 'too-long' },
  );
  assert.equal(res.status, 400);
  await res.json();
  await waitFor(
    async () => finishedRecords.some((r) => r.params?.['remote_engine_id'] === 'prefill-7'),
    5000,
    `requestFinished of the rejected request (seen: ${JSON.stringify(finishedRecords.map((r) => r.requestId))})`,
  );
  const record = finishedRecords.find((r) => r.params?.['remote_engine_id'] === 'prefill-7')!;
  assert.match(record.requestId, /^cmpl-too-long-[0-9a-f]{8}$/);
  assert.equal(record.params?.['do_remote_prefill'], true);
  assert.equal(record.status, 'FINISHED_ABORTED');
});

test('connector stats reach /metrics; /kvconnect/info names the connector', async () => {
  const text = await (await fetch(`${running.url}/metrics`)).text();
  assert.ok(metricValue(text, 'kvconnect:echo_steps_saved_count', 'model_name="tiny"') >= 1);
  const info = (await (await fetch(`${running.url}/kvconnect/info`)).json()) as Record<string, unknown>;
  assert.equal(info['kv_connector'], 'EchoParamsConnector');
  assert.equal(info['kv_role'], 'kv_both');
  assert.equal(info['engine_id'], 'engine-under-test');
  assert.equal(info['tensor_parallel_size'], 1);
});
