/**
 * --fake-metrics on a real server: GET /metrics reports the fake values only, under vLLM's
 * families (promtool accepts the text), with gauges that follow their function of time,
 * histograms with the given per-bucket counts, counters at their totals, and LoRA rows as
 * vLLM writes vllm:lora_requests_info. The spec's parser keeps the sim's forms and rejects
 * bad fields by name.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import {
  type FakeValue,
  fakeMetricsJson,
  fakeValueAt,
  mergeFakeMetrics,
  parseFakeMetrics,
} from '../../src/config/fake-metrics.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { kvError } from '../helpers/kv-error.ts';
import { waitUntil } from '../helpers/wait-until.ts';
import {
  assertPromtoolAccepts,
  assertVllmShape,
  type Exposition,
  parseExposition,
  sampleValue,
} from './helpers/prom-text.ts';
import { type Served, serve, stop } from './helpers/served.ts';

setLogLevel('error');

const SPEC = {
  'running-requests': 7,
  'waiting-requests': 'squarewave:2:9:400ms',
  'kv-cache-usage': 0.42,
  loras: [
    { running: 'lora1,lora2', waiting: 'lora3', timestamp: 1257894567 },
    { running: 'lora1', waiting: '', timestamp: 1257894569 },
  ],
  'ttft-buckets-values': [1, 0, 3],
  'e2erl-buckets-values': [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
  'request-prompt-tokens': [0, 4, 1],
  'request-success-total': { stop: 20, length: 5 },
  'total-generation-tokens': 321,
  'prefix-cache-hits': 50,
  'prefix-cache-queries': 200,
};

async function scrape(url: string): Promise<{ text: string; exp: Exposition }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return { text, exp: parseExposition(text) };
}

describe('fake metrics served', () => {
  let s: Served;
  const M = { model_name: 'tiny', engine: '0' };
  before(async () => {
    s = await serve({}, { fakeMetrics: parseFakeMetrics(JSON.stringify(SPEC)), fakeMetricsRefreshMs: 20 });
  });
  after(async () => stop(s));

  it('promtool accepts the scrape; vLLM family names and labels', async (t: TestContext) => {
    const { text, exp } = await scrape(s.url);
    await assertPromtoolAccepts(text, t);
    assertVllmShape(exp, 'tiny');
    assert.equal(exp.types.get('vllm:lora_requests_info'), 'gauge');
    assert.equal(exp.helps.get('vllm:lora_requests_info'), 'Running stats on lora requests.');
  });

  it('gauges, histogram buckets, counters and LoRA rows have the fake values', async () => {
    const { exp } = await scrape(s.url);
    assert.equal(sampleValue(exp, 'vllm:num_requests_running', M), 7);
    assert.equal(sampleValue(exp, 'vllm:kv_cache_usage_perc', M), 0.42);
    // TTFT: 1 in the first bucket (le 0.001), 3 in the third (le 0.01); cumulative on the wire.
    const ttft = (le: string): number =>
      sampleValue(exp, 'vllm:time_to_first_token_seconds_bucket', { ...M, le });
    assert.equal(ttft('0.001'), 1);
    assert.equal(ttft('0.005'), 1);
    assert.equal(ttft('0.01'), 4);
    assert.equal(ttft('+Inf'), 4);
    assert.equal(sampleValue(exp, 'vllm:time_to_first_token_seconds_count', M), 4);
    assert.ok(Math.abs(sampleValue(exp, 'vllm:time_to_first_token_seconds_sum', M) - 0.031) < 1e-9);
    // The 22nd e2e count is the +Inf bucket: observed as the last bound + 1.
    assert.equal(sampleValue(exp, 'vllm:e2e_request_latency_seconds_bucket', { ...M, le: '7680.0' }), 0);
    assert.equal(sampleValue(exp, 'vllm:e2e_request_latency_seconds_bucket', { ...M, le: '+Inf' }), 2);
    assert.equal(sampleValue(exp, 'vllm:e2e_request_latency_seconds_sum', M), 2 * 7681);
    // Prompt lengths: 4 of le 2, 1 of le 5; the prompt-token total is their sum (no explicit total).
    assert.equal(sampleValue(exp, 'vllm:request_prompt_tokens_count', M), 5);
    assert.equal(sampleValue(exp, 'vllm:prompt_tokens_total', M), 4 * 2 + 5);
    assert.equal(sampleValue(exp, 'vllm:generation_tokens_total', M), 321);
    assert.equal(sampleValue(exp, 'vllm:request_success_total', { ...M, finished_reason: 'stop' }), 20);
    assert.equal(sampleValue(exp, 'vllm:request_success_total', { ...M, finished_reason: 'length' }), 5);
    assert.equal(sampleValue(exp, 'vllm:request_success_total', { ...M, finished_reason: 'abort' }), 0);
    assert.equal(sampleValue(exp, 'vllm:prefix_cache_hits_total', M), 50);
    assert.equal(sampleValue(exp, 'vllm:prefix_cache_queries_total', M), 200);
    const lora = exp.samples.filter((x) => x.name === 'vllm:lora_requests_info');
    assert.deepEqual(
      lora.map((x) => [x.labels, x.value]),
      [
        [{ max_lora: '1', running_lora_adapters: 'lora1,lora2', waiting_lora_adapters: 'lora3' }, 1257894567],
        [{ max_lora: '1', running_lora_adapters: 'lora1', waiting_lora_adapters: '' }, 1257894569],
      ],
    );
  });

  it('a function-valued gauge moves with time (squarewave between its levels)', async () => {
    const seen = new Set<number>();
    await waitUntil(
      'both squarewave levels on /metrics',
      async () => {
        const { exp } = await scrape(s.url);
        seen.add(sampleValue(exp, 'vllm:num_requests_waiting', M));
        return seen.size >= 2;
      },
      { timeoutMs: 5000, intervalMs: 50 },
    );
    assert.deepEqual(
      [...seen].sort((a, b) => a - b),
      [2, 9],
    );
  });

  it('real traffic does not leak into the fake scrape', async () => {
    const res = await fetch(`${s.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', prompt: 'Hello there', max_tokens: 3 }),
    });
    assert.equal(res.status, 200);
    await res.json();
    const { exp } = await scrape(s.url);
    assert.equal(sampleValue(exp, 'vllm:generation_tokens_total', M), 321);
    assert.equal(sampleValue(exp, 'vllm:request_success_total', { ...M, finished_reason: 'stop' }), 20);
    assert.equal(sampleValue(exp, 'vllm:num_requests_running', M), 7);
  });
});

describe('the fake-metrics spec', () => {
  const fn = (text: string): FakeValue => {
    const v = parseFakeMetrics({ 'kv-cache-usage': text }).gauges['kv-cache-usage'];
    assert.ok(v);
    return v;
  };

  it("follows the sim's function shapes", () => {
    const s = 1e9;
    const osc = fn('oscillate:0.2:0.6:4s');
    assert.ok(Math.abs(fakeValueAt(osc, 0) - 0.4) < 1e-12);
    assert.ok(Math.abs(fakeValueAt(osc, 1 * s) - 0.6) < 1e-12);
    assert.ok(Math.abs(fakeValueAt(osc, 3 * s) - 0.2) < 1e-12);
    const ramp = fn('ramp:0:1:2s');
    assert.equal(fakeValueAt(ramp, 0.5 * s), 0.25);
    assert.equal(fakeValueAt(ramp, 5 * s), 1);
    const reset = fn('rampreset:0:1:2s');
    assert.equal(fakeValueAt(reset, 2.5 * s), 0.25);
    const square = fn('squarewave:0.1:0.9:2s');
    assert.equal(fakeValueAt(square, 0.9 * s), 0.1);
    assert.equal(fakeValueAt(square, 1.1 * s), 0.9);
    assert.equal(fakeValueAt(square, 2.1 * s), 0.1);
  });

  it('round-trips through the JSON form; partial updates keep, [] and {} clear', () => {
    const spec = parseFakeMetrics(JSON.stringify(SPEC));
    assert.deepEqual(parseFakeMetrics(fakeMetricsJson(spec)), spec);
    assert.equal(fakeMetricsJson(spec)['waiting-requests'], 'squarewave:2:9:400ms');
    const next = mergeFakeMetrics(spec, {
      'running-requests': 1,
      'waiting-requests': null,
      'ttft-buckets-values': [],
      'request-success-total': {},
    });
    assert.deepEqual(next.gauges['running-requests'], { kind: 'fixed', value: 1 });
    assert.deepEqual(next.gauges['waiting-requests'], spec.gauges['waiting-requests']);
    assert.equal(next.buckets['ttft-buckets-values'], undefined);
    assert.equal(next.requestSuccessTotal, null);
    assert.equal(next.totals['prefix-cache-hits'], 50);
  });

  it('rejects bad fields by name', () => {
    for (const [raw, field] of [
      ['{', 'fake-metrics'],
      [{ 'kv-cache-usage': 1.5 }, 'fake-metrics.kv-cache-usage'],
      [{ 'kv-cache-usage': 'ramp:0:2:1s' }, 'fake-metrics.kv-cache-usage'],
      [{ 'running-requests': 'wobble:0:2:1s' }, 'fake-metrics.running-requests'],
      [{ 'running-requests': 'ramp:0:2:0s' }, 'fake-metrics.running-requests'],
      [{ 'running-requests': -1 }, 'fake-metrics.running-requests'],
      [{ 'ttft-buckets-values': [1, -2] }, 'fake-metrics.ttft-buckets-values[1]'],
      [{ loras: [{ running: 'a', when: 3 }] }, 'fake-metrics.loras[0].when'],
      [{ 'runing-requests': 3 }, 'fake-metrics.runing-requests'],
    ] as const) {
      const e = kvError(() => parseFakeMetrics(raw));
      assert.equal(e.field, field, `${JSON.stringify(raw)}: ${e.message}`);
      assert.ok(e.hint, field);
    }
    assert.match(kvError(() => parseFakeMetrics({ 'runing-requests': 3 })).hint ?? '', /running-requests/);
  });
});
