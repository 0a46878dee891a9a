/**
 * GET / POST /admin/config on a running server (dev mode only): failure injection, the
 * latency model, fake metrics and KV-load faults change mid-run; a bad body is a 400 naming
 * the field and changes nothing, even when its other fields are good. Plus
 * `--startup-duration`: GET /health/ready answers 503 until it has passed.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { parseExposition, sampleValue } from './helpers/prom-text.ts';
import { type Served, serve, stop } from './helpers/served.ts';

setLogLevel('error');

/** A config (200) or an error body (4xx). */
type AdminJson = Record<string, unknown> & {
  error: { code: number; kvconnect_code: string; param: string | null; hint?: string };
};

async function admin(url: string, body?: unknown): Promise<{ status: number; json: AdminJson }> {
  const res = await fetch(`${url}/admin/config`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
  });
  return { status: res.status, json: (await res.json()) as AdminJson };
}

async function complete(url: string, extra: Record<string, unknown> = {}): Promise<Response> {
  return fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', prompt: 'In the beginning', max_tokens: 2, ...extra }),
  });
}

describe('/admin/config', () => {
  let s: Served;
  before(async () => {
    s = await serve({ max_num_seqs: 4 }, { devMode: true });
  });
  after(async () => stop(s));

  it("GET shows the steerable configuration with the sim's keys", async () => {
    const { status, json } = await admin(s.url);
    assert.equal(status, 200);
    assert.equal(json['failure-injection-rate'], 0);
    assert.deepEqual(json['failure-types'], []);
    assert.equal(json['time-to-first-token'], '0s');
    assert.equal(json['time-factor-under-load'], 1);
    assert.equal(json['latency-calculator'], null);
    assert.equal(json['fake-metrics'], null);
    assert.equal(json['kv-load-failure-rate'], 0);
  });

  it('failure injection switched on and off mid-run', async () => {
    const on = await admin(s.url, { 'failure-injection-rate': 100, 'failure-types': ['rate_limit'] });
    assert.equal(on.status, 200, JSON.stringify(on.json));
    assert.equal(on.json['failure-injection-rate'], 100);
    const failed = await complete(s.url);
    assert.equal(failed.status, 429);
    assert.equal(((await failed.json()) as AdminJson).error.kvconnect_code, 'SERVER_INJECTED_RATE_LIMIT');
    assert.equal((await admin(s.url, { 'failure-injection-rate': 0 })).status, 200);
    const ok = await complete(s.url);
    assert.equal(ok.status, 200);
    await ok.json();
  });

  it('a bad POST is a 400 naming the field and changes nothing', async () => {
    const before = (await admin(s.url)).json;
    const cases: Array<[unknown, string, string]> = [
      [{ 'failure-injection-rate': 101 }, 'failure-injection-rate', 'KV_CONFIG_INVALID'],
      [{ 'failure-types': ['teapot'] }, 'failure-types', 'KV_CONFIG_INVALID'],
      [{ 'max-num-seqs': 3 }, 'max-num-seqs', 'KV_CONFIG_UNKNOWN_KEY'],
      // Good fields beside a bad one are not applied either.
      [
        { 'failure-injection-rate': 50, 'time-to-first-token': '10ms', 'time-to-first-token-std-dev': '9ms' },
        'time-to-first-token-std-dev',
        'KV_CONFIG_INVALID',
      ],
      [
        { 'failure-injection-rate': 50, 'fake-metrics': { 'kv-cache-usage': 3 } },
        'fake-metrics.kv-cache-usage',
        'KV_CONFIG_INVALID',
      ],
      [
        { 'failure-injection-rate': 50, 'fake-metrics': { 'ttft-buckets-values': new Array(30).fill(1) } },
        'fake-metrics.ttft-buckets-values',
        'KV_CONFIG_INVALID',
      ],
      [{ 'kv-load-stall-rate': 10 }, 'kv-load-stall-duration', 'KV_CONFIG_INVALID'],
      [{ 'inter-token-latency': '5 parsecs' }, 'inter-token-latency', 'KV_CONFIG_INVALID'],
      [[1, 2], 'body', 'KV_CONFIG_INVALID'],
      ['{"failure-injection-rate": ', 'body', 'SERVER_INVALID_JSON'],
    ];
    for (const [body, field, code] of cases) {
      const { status, json } = await admin(s.url, body);
      assert.equal(status, 400, `${JSON.stringify(body)}: ${JSON.stringify(json)}`);
      assert.equal(json.error.code, 400);
      assert.equal(json.error.kvconnect_code, code, JSON.stringify(body));
      if (field !== 'body') assert.equal(json.error.param, field, JSON.stringify(json));
      assert.ok(json.error.hint, JSON.stringify(body));
    }
    assert.deepEqual((await admin(s.url)).json, before);
    const ok = await complete(s.url);
    assert.equal(ok.status, 200, 'no failure injection slipped in');
    await ok.json();
  });

  it('the latency model changes mid-stream: later tokens follow the new inter-token latency', async () => {
    assert.equal((await admin(s.url, { 'inter-token-latency': '40ms' })).status, 200);
    const res = await complete(s.url, { max_tokens: 10, ignore_eos: true, stream: true });
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    const arrivals: number[] = [];
    let buffered = '';
    let posted = false;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      const events = buffered.split('\n\n');
      buffered = events.pop() ?? '';
      for (const e of events) {
        if (!e.startsWith('data: {')) continue;
        arrivals.push(performance.now());
        if (!posted && arrivals.length === 2) {
          posted = true;
          const changed = await admin(s.url, { 'inter-token-latency': '200ms' });
          assert.equal(changed.status, 200, JSON.stringify(changed.json));
          assert.equal(changed.json['inter-token-latency'], '200ms');
          assert.equal(changed.json['latency-calculator'], '');
        }
      }
    }
    assert.equal(arrivals.length, 10);
    // The last four gaps are decode steps timed by the new model (a step lasts at least that long).
    const gaps = arrivals
      .slice(-5)
      .map((t, i, a) => (i === 0 ? 0 : t - (a[i - 1] as number)))
      .slice(1);
    for (const g of gaps)
      assert.ok(g >= 140, `gap ${g.toFixed(0)} ms after ITL 150ms: ${gaps.map(Math.round)}`);
    assert.equal((await admin(s.url, { 'inter-token-latency': 0 })).status, 200);
  });

  it('fake metrics switched on at run time, then partially updated', async () => {
    const m = { model_name: 'tiny', engine: '0' };
    const on = await admin(s.url, { 'fake-metrics': { 'running-requests': 5, 'kv-cache-usage': 0.25 } });
    assert.equal(on.status, 200, JSON.stringify(on.json));
    let exp = parseExposition(await (await fetch(`${s.url}/metrics`)).text());
    assert.equal(sampleValue(exp, 'vllm:num_requests_running', m), 5);
    assert.equal(sampleValue(exp, 'vllm:kv_cache_usage_perc', m), 0.25);
    assert.equal(sampleValue(exp, 'vllm:generation_tokens_total', m), 0, 'the real traffic is not reported');
    const upd = await admin(s.url, {
      'fake-metrics': { 'kv-cache-usage': 'ramp:0:1:1h', 'prefix-cache-hits': 9 },
    });
    assert.deepEqual(upd.json['fake-metrics'], {
      'running-requests': 5,
      'kv-cache-usage': 'ramp:0:1:3600s',
      'prefix-cache-hits': 9,
    });
    exp = parseExposition(await (await fetch(`${s.url}/metrics`)).text());
    assert.equal(sampleValue(exp, 'vllm:num_requests_running', m), 5);
    assert.ok(sampleValue(exp, 'vllm:kv_cache_usage_perc', m) < 0.01);
    assert.equal(sampleValue(exp, 'vllm:prefix_cache_hits_total', m), 9);
  });

  it('KV-load faults are steerable', async () => {
    const { status, json } = await admin(s.url, {
      'kv-load-failure-rate': 20,
      'kv-load-stall-rate': 30,
      'kv-load-stall-duration': '2s',
    });
    assert.equal(status, 200, JSON.stringify(json));
    assert.equal(json['kv-load-failure-rate'], 20);
    assert.equal(json['kv-load-stall-rate'], 30);
    assert.equal(json['kv-load-stall-duration'], '2s');
    assert.equal(s.engine.engine.config.kvLoadFaults ?? null, null, 'the startup config is not rewritten');
  });
});

describe('without dev mode', () => {
  let s: Served;
  before(async () => {
    s = await serve({}, { devMode: false });
  });
  after(async () => stop(s));

  it('/admin/config does not exist', async () => {
    assert.equal((await fetch(`${s.url}/admin/config`)).status, 404);
    const post = await fetch(`${s.url}/admin/config`, {
      method: 'POST',
      body: '{"failure-injection-rate":100}',
    });
    assert.equal(post.status, 404);
  });
});

describe('--startup-duration', () => {
  let s: Served;
  let startedAt: number;
  before(async () => {
    startedAt = performance.now();
    s = await serve({}, { startupDurationNs: 2e9 });
  });
  after(async () => stop(s));

  it('GET /health/ready answers 503 until it has passed, then 200; /health is 200 throughout', async () => {
    // The server was created moments ago (serve() returns right after it listens).
    const early = await fetch(`${s.url}/health/ready`);
    assert.equal(early.status, 503);
    const body = (await early.json()) as AdminJson;
    assert.equal(body.error.kvconnect_code, 'SERVER_STARTING');
    assert.match(body.error.hint ?? '', /Ready in \d+ ms/);
    assert.equal((await fetch(`${s.url}/health`)).status, 200);
    let ready = 0;
    while (ready !== 200) {
      ready = (await fetch(`${s.url}/health/ready`)).status;
      if (ready !== 200) await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(performance.now() - startedAt >= 2000, 'ready before the startup duration');
  });
});
