/**
 * Bad input over raw HTTP: each case gets an OpenAI-style JSON error with the right status,
 * and the server answers a good request right after. Plus API keys, disconnects, the bounded
 * queue, the rejected-before-admission notice (docs/scheduler.md#delayed-free-and-aborts) and
 * /metrics.
 */
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { after, before, test } from 'node:test';
import type { AsyncEngineLike, GenerateRequest } from '../../src/engine/api.ts';
import { metricValue, postJson, type Running, startEngine, startServer, waitFor } from './helpers/harness.ts';

let engine: AsyncEngineLike;
let running: Running;
/** Every request the server submitted to the engine (the engine itself is real). */
const submitted: GenerateRequest[] = [];

before(async () => {
  engine = await startEngine({ max_num_seqs: 2, max_model_len: 1024 });
  // Recorded on the engine itself (its own notifyKvTransferRequestRejected calls this.generate):
  // an object that merely inherits from it cannot reach its #private state.
  const generate = engine.generate.bind(engine);
  engine.generate = (req: GenerateRequest, signal?: AbortSignal) => {
    submitted.push(req);
    return generate(req, signal);
  };
  running = await startServer({ engine, maxQueue: 1, maxBodyBytes: 64 * 1024 });
});

after(async () => {
  await running?.close();
  await engine?.shutdown();
});

const good = { model: 'tiny', prompt: 'ok', max_tokens: 2 };

async function expectError(
  res: Response,
  status: number,
  param?: string,
): Promise<{ message: string; code: string }> {
  assert.equal(res.status, status, await res.clone().text());
  assert.match(res.headers.get('content-type') ?? '', /application\/json/);
  const body = (await res.json()) as {
    error: {
      message: string;
      type: string;
      code: number;
      kvconnect_code: string;
      param: string | null;
      hint?: string;
    };
  };
  assert.equal(body.error.code, status, "vLLM's ErrorInfo.code is the HTTP status");
  assert.equal(typeof body.error.message, 'string');
  assert.equal(typeof body.error.type, 'string');
  assert.ok(body.error.hint, 'every error carries a hint');
  if (param !== undefined) assert.equal(body.error.param, param);
  const after = await postJson(`${running.url}/v1/completions`, good);
  assert.equal(after.status, 200, 'the server keeps serving after a bad request');
  await after.json();
  return { message: body.error.message, code: body.error.kvconnect_code };
}

test('malformed JSON, non-object body, wrong types and out-of-range values are 400s', async () => {
  const url = `${running.url}/v1/completions`;
  assert.equal((await expectError(await postJson(url, '{"prompt": "x",'), 400)).code, 'SERVER_INVALID_JSON');
  await expectError(await postJson(url, '[1,2]'), 400, 'body');
  await expectError(await postJson(url, { prompt: 42 }), 400, 'prompt');
  await expectError(await postJson(url, { prompt: [1, -5] }), 400, 'prompt');
  await expectError(await postJson(url, { ...good, temperature: 'hot' }), 400, 'temperature');
  await expectError(await postJson(url, { ...good, top_p: 2 }), 400, 'top_p');
  await expectError(await postJson(url, { ...good, max_tokens: 0 }), 400, 'max_tokens');
  await expectError(await postJson(url, { ...good, n: 1.5 }), 400, 'n');
  await expectError(await postJson(url, { ...good, logprobs: 99 }), 400, 'logprobs');
  // pydantic reads "yes" as true (lax mode), as vLLM does; "maybe" is no boolean.
  await expectError(await postJson(url, { ...good, stream: 'maybe' }), 400, 'stream');
  const chat = `${running.url}/v1/chat/completions`;
  await expectError(await postJson(chat, { messages: 'hi' }), 400, 'messages');
  await expectError(
    await postJson(chat, { messages: [{ role: 'user', content: 'x' }], top_logprobs: 2 }),
    400,
    'top_logprobs',
  );
});

test('unknown model is a 404, unknown route a 404, wrong method a 405', async () => {
  const e = await expectError(
    await postJson(`${running.url}/v1/completions`, { ...good, model: 'gpt-9' }),
    404,
    'model',
  );
  assert.equal(e.message, 'The model `gpt-9` does not exist.');
  await expectError(await fetch(`${running.url}/v2/nothing`), 404);
  await expectError(await fetch(`${running.url}/v1/completions`), 405);
});

test("oversize prompts get vLLM's max-context message", async () => {
  const url = `${running.url}/v1/completions`;
  const long = 'a'.repeat(1100);
  const n = engine.tokenizer.encode(long).length;
  const e = await expectError(await postJson(url, { prompt: long, max_tokens: 1 }), 400);
  assert.equal(
    e.message,
    `This model's maximum context length is 1024 tokens. However, your request has ${n} input tokens. Please reduce the length of the input messages.`,
  );
  const e2 = await expectError(
    await postJson(url, { prompt: 'a'.repeat(1000), max_tokens: 100 }),
    400,
    'max_tokens',
  );
  assert.match(e2.message, /^'max_tokens' or 'max_completion_tokens' is too large: 100\./);
});

test('a body over the limit is a 413', async () => {
  const e = await expectError(
    await postJson(`${running.url}/v1/completions`, { prompt: 'x'.repeat(100 * 1024) }),
    413,
  );
  assert.equal(e.code, 'SERVER_BODY_TOO_LARGE');
});

test('garbage kv_transfer_params is a 400; rejected do_remote_prefill requests still reach the engine', async () => {
  const url = `${running.url}/v1/completions`;
  await expectError(await postJson(url, { ...good, kv_transfer_params: 'yes' }), 400, 'kv_transfer_params');
  await expectError(
    await postJson(url, { ...good, kv_transfer_params: { remote_port: 'x' } }),
    400,
    'kv_transfer_params.remote_port',
  );

  const params = {
    do_remote_prefill: true,
    remote_engine_id: 'P-engine',
    remote_block_ids: [1, 2],
    remote_host: '127.0.0.1',
    remote_port: 5600,
  };
  const before = submitted.length;
  const res = await postJson(
    url,
    { ...good, temperature: -1, kv_transfer_params: params },
    { 'X-Request-Id': 'rejected-1' },
  );
  assert.equal(res.status, 400);
  await res.json();
  await waitFor(
    async () => submitted.slice(before).some((r) => r.kvTransferParams?.['remote_engine_id'] === 'P-engine'),
    2000,
    'the rejection notice',
  );
  const notice = submitted
    .slice(before)
    .find((r) => r.kvTransferParams?.['remote_engine_id'] === 'P-engine')!;
  assert.match(notice.requestId, /^cmpl-rejected-1-[0-9a-f]{8}$/);
  assert.deepEqual(notice.kvTransferParams, params);
  assert.equal(notice.sampling.maxTokens, 1);
  await waitFor(
    async () => engine.stats().numRequestsRunning + engine.stats().numRequestsWaiting === 0,
    2000,
    'the dummy request to finish',
  );
});

test('API key: 401 when missing or wrong, 200 when right; /metrics stays open', async () => {
  const secured = await startServer({ engine, apiKey: 'sekrit' });
  try {
    const url = `${secured.url}/v1/completions`;
    assert.equal((await postJson(url, good)).status, 401);
    const wrong = await postJson(url, good, { authorization: 'Bearer nope' });
    assert.equal(wrong.status, 401);
    assert.equal(
      ((await wrong.json()) as { error: { kvconnect_code: string } }).error.kvconnect_code,
      'SERVER_UNAUTHORIZED',
    );
    const ok = await postJson(url, good, { authorization: 'Bearer sekrit' });
    assert.equal(ok.status, 200);
    await ok.json();
    assert.equal((await fetch(`${secured.url}/metrics`)).status, 200);
  } finally {
    await secured.close();
  }
});

/** Opens a streaming completion and resolves once the response headers arrived; destroy() disconnects. */
function openStream(url: string, maxTokens: number): Promise<{ destroy(): void; status: number }> {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({
      prompt: 'stream me',
      max_tokens: maxTokens,
      ignore_eos: true,
      stream: true,
    });
    const req = httpRequest(
      `${url}/v1/completions`,
      { method: 'POST', headers: { 'content-type': 'application/json' } },
      (res) => {
        res.on('error', () => {});
        res.resume();
        resolve({ destroy: () => req.destroy(), status: res.statusCode ?? 0 });
      },
    );
    req.on('error', (e) => {
      if (!(e as NodeJS.ErrnoException).code?.startsWith('ECONNRESET')) reject(e);
    });
    req.end(body);
  });
}

async function metrics(): Promise<string> {
  return (await fetch(`${running.url}/metrics`)).text();
}

test('a client that disconnects mid-stream frees its KV blocks', async () => {
  const stream = await openStream(running.url, 1000);
  assert.equal(stream.status, 200);
  await waitFor(
    async () => metricValue(await metrics(), 'vllm:kv_cache_usage_perc') > 0,
    3000,
    'KV usage during the stream',
  );
  assert.equal(metricValue(await metrics(), 'vllm:num_requests_running'), 1);
  stream.destroy();
  await waitFor(
    async () => {
      const text = await metrics();
      return (
        metricValue(text, 'vllm:kv_cache_usage_perc') === 0 &&
        metricValue(text, 'vllm:num_requests_running') === 0
      );
    },
    3000,
    'KV usage back to 0 after the disconnect',
  );
  assert.equal(running.server.gate.inFlight, 0);
});

test('a full queue answers 503 instead of growing, and recovers', async () => {
  // capacity = max_num_seqs (2) + maxQueue (1)
  const streams = await Promise.all([
    openStream(running.url, 1000),
    openStream(running.url, 1000),
    openStream(running.url, 1000),
  ]);
  try {
    const e = await postJson(`${running.url}/v1/completions`, good);
    assert.equal(e.status, 503);
    const body = (await e.json()) as { error: { kvconnect_code: string; type: string } };
    assert.equal(body.error.kvconnect_code, 'SERVER_QUEUE_FULL');
    assert.equal(body.error.type, 'ServiceUnavailableError');
  } finally {
    for (const s of streams) s.destroy();
  }
  await waitFor(async () => running.server.gate.inFlight === 0, 3000, 'the streams to be released');
  const ok = await postJson(`${running.url}/v1/completions`, good);
  assert.equal(ok.status, 200);
  await ok.json();
});

test('/metrics exposes vLLM names with sane values after traffic', async () => {
  const res = await postJson(`${running.url}/v1/completions`, {
    prompt: 'count me',
    max_tokens: 3,
    ignore_eos: true,
  });
  await res.json();
  const text = await metrics();
  for (const name of [
    'vllm:num_requests_running',
    'vllm:num_requests_waiting',
    'vllm:prompt_tokens_total',
    'vllm:generation_tokens_total',
    'vllm:prefix_cache_queries_total',
    'vllm:prefix_cache_hits_total',
    'vllm:external_prefix_cache_queries_total',
    'vllm:external_prefix_cache_hits_total',
    'vllm:kv_cache_usage_perc',
  ]) {
    assert.ok(metricValue(text, name, 'model_name="tiny"') >= 0, name);
  }
  const prompt = metricValue(text, 'vllm:prompt_tokens_total');
  const generated = metricValue(text, 'vllm:generation_tokens_total');
  assert.ok(prompt >= engine.tokenizer.encode('count me').length);
  assert.ok(generated >= 3);
  assert.ok(
    metricValue(text, 'vllm:prefix_cache_hits_total') <= metricValue(text, 'vllm:prefix_cache_queries_total'),
  );
  assert.ok(metricValue(text, 'vllm:time_to_first_token_seconds_count') >= 1);
  assert.ok(metricValue(text, 'vllm:e2e_request_latency_seconds_count') >= 1);
  assert.ok(
    metricValue(text, 'vllm:e2e_request_latency_seconds_sum') >=
      metricValue(text, 'vllm:time_to_first_token_seconds_sum'),
  );
  const again = await metrics();
  assert.equal(
    metricValue(again, 'vllm:prompt_tokens_total'),
    prompt,
    'counters do not move without traffic',
  );
});
