/**
 * Conformance with vLLM's /metrics as its dashboards query it, over a real socket: numbers
 * as Python's prometheus_client writes them (`le="1.0"`), the HTTP families of
 * prometheus-fastapi-instrumentator (names, labels, excluded routes), and the upstream
 * families vllm:request_max_num_generation_tokens, vllm:request_params_n,
 * vllm:prompt_tokens_cached_by_source_total and vllm:num_requests_kv_fetch_by_stage.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { postJson, servedForTests } from '../server/helpers/harness.ts';
import { parseExposition, sampleValue } from '../server/helpers/prom-text.ts';

const served = servedForTests();

async function scrape(): Promise<{ text: string; exp: ReturnType<typeof parseExposition> }> {
  const text = await (await fetch(`${served.url}/metrics`)).text();
  return { text, exp: parseExposition(text) };
}

test('numbers as prometheus_client writes them: le="1.0", le="+Inf", sample values as Python floats', async () => {
  const { text } = await scrape();
  assert.match(
    text,
    /^vllm:time_to_first_token_seconds_bucket\{[^}]*le="1\.0"[^}]*\} \d+\.\d+$/m,
    'vLLM\'s TTFT SLO panel selects le="1.0"',
  );
  assert.match(text, /^vllm:time_to_first_token_seconds_bucket\{[^}]*le="0\.001"/m);
  assert.match(text, /^vllm:e2e_request_latency_seconds_bucket\{[^}]*le="7680\.0"/m);
  assert.match(text, /^vllm:time_to_first_token_seconds_bucket\{[^}]*le="\+Inf"/m);
  const les = [...text.matchAll(/le="([^"]*)"/g)].map((m) => m[1]!);
  assert.ok(les.length > 50);
  for (const le of les)
    assert.match(le, /^(\+Inf|-?\d+\.\d+(e[+-]\d+)?)$/, `le="${le}" is not a Python float repr`);
  for (const line of text.split('\n').filter((l) => l !== '' && !l.startsWith('#'))) {
    assert.match(line.slice(line.lastIndexOf(' ') + 1), /^(-?\d+\.\d+(e[+-]?\d+)?|[+-]Inf|NaN)$/, line);
  }
});

test("HTTP families with prometheus-fastapi-instrumentator's names and labels; vLLM's excluded routes are not counted", async () => {
  const ok = await postJson(`${served.url}/v1/completions`, { prompt: 'Hi', max_tokens: 2 });
  assert.equal(ok.status, 200);
  await ok.text();
  assert.equal((await postJson(`${served.url}/v1/completions`, { prompt: 7 })).status, 400);
  assert.equal((await fetch(`${served.url}/no/such/route`)).status, 404);
  await fetch(`${served.url}/health`);
  await fetch(`${served.url}/version`);
  const { exp } = await scrape();
  const completions = { handler: '/v1/completions', method: 'POST' };
  assert.equal(sampleValue(exp, 'http_requests_total', { ...completions, status: '2xx' }), 1);
  assert.equal(sampleValue(exp, 'http_requests_total', { ...completions, status: '4xx' }), 1);
  assert.equal(sampleValue(exp, 'http_requests_total', { handler: 'none', method: 'GET', status: '4xx' }), 1);
  assert.equal(sampleValue(exp, 'http_request_duration_seconds_count', completions), 2);
  assert.equal(sampleValue(exp, 'http_request_duration_seconds_bucket', { ...completions, le: '+Inf' }), 2);
  assert.ok(
    exp.samples.some((s) => s.name === 'http_request_duration_seconds_bucket' && s.labels['le'] === '0.1'),
  );
  assert.equal(sampleValue(exp, 'http_request_duration_highr_seconds_count'), 3);
  assert.ok(sampleValue(exp, 'http_request_size_bytes_sum', { handler: '/v1/completions' }) > 0);
  for (const excluded of ['/health', '/version', '/metrics'])
    assert.ok(!exp.samples.some((s) => s.labels['handler'] === excluded), `${excluded} is excluded`);
  assert.equal(exp.types.get('http_requests_total'), 'counter');
  assert.equal(exp.types.get('http_request_duration_seconds'), 'histogram');
});

test('vllm:request_max_num_generation_tokens and vllm:request_params_n per finished prompt', async () => {
  const before = (await scrape()).exp;
  const count = (exp: typeof before, name: string) => sampleValue(exp, `${name}_count`);
  const sum = (exp: typeof before, name: string) => sampleValue(exp, `${name}_sum`);
  const res = await postJson(`${served.url}/v1/completions`, {
    prompt: 'The cat',
    max_tokens: 3,
    n: 2,
    ignore_eos: true,
  });
  assert.equal(res.status, 200);
  await res.text();
  const afterExp = (await scrape()).exp;
  assert.equal(
    count(afterExp, 'vllm:request_max_num_generation_tokens') -
      count(before, 'vllm:request_max_num_generation_tokens'),
    1,
  );
  assert.equal(
    sum(afterExp, 'vllm:request_max_num_generation_tokens') -
      sum(before, 'vllm:request_max_num_generation_tokens'),
    3,
  );
  assert.equal(sum(afterExp, 'vllm:request_params_n') - sum(before, 'vllm:request_params_n'), 2);
});

test('vllm:prompt_tokens_cached_by_source_total: local prefix hits are device, matching prompt_tokens_cached', async () => {
  const prompt = 'A prompt long enough to fill a couple of KV blocks of sixteen tokens each, twice over.';
  const first = await postJson(`${served.url}/v1/completions`, { prompt, max_tokens: 1 });
  await first.text();
  const before = (await scrape()).exp;
  const again = await postJson(`${served.url}/v1/completions`, { prompt, max_tokens: 1 });
  await again.text();
  const afterExp = (await scrape()).exp;
  const delta = (name: string, labels: Record<string, string> = {}) =>
    sampleValue(afterExp, name, labels) - sampleValue(before, name, labels);
  const cached = delta('vllm:prompt_tokens_cached_total');
  assert.ok(cached >= 16, `the repeated prompt hit the prefix cache (${cached} tokens)`);
  assert.equal(delta('vllm:prompt_tokens_cached_by_source_total', { source: 'device' }), cached);
  for (const source of ['host', 'p2p', 'disk', 'external_unspecified'])
    assert.equal(sampleValue(afterExp, 'vllm:prompt_tokens_cached_by_source_total', { source }), 0);
  for (const stage of ['waiting_to_start', 'in_progress', 'completed_waiting'])
    assert.equal(sampleValue(afterExp, 'vllm:num_requests_kv_fetch_by_stage', { stage }), 0);
});
