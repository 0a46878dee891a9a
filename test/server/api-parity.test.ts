/**
 * vLLM's utility endpoints on a running server: /tokenize and /detokenize (the ids the
 * generation endpoints use; bad input is a 400 naming the field and the server keeps
 * serving), /v1/models with vLLM's ModelCard fields, /version, and the development
 * endpoint POST /reset_prefix_cache (only with VLLM_SERVER_DEV_MODE, as in vLLM).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { AsyncEngine } from '../../src/engine/async-engine.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { parseExposition, sampleValue } from './helpers/prom-text.ts';
import { type Served, serve, stop } from './helpers/served.ts';

setLogLevel('error');

function serveTiny(options: Record<string, unknown>, devMode: boolean): Promise<Served> {
  return serve({ max_model_len: 128, num_gpu_blocks: 32, ...options }, { devMode });
}

async function post(url: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text === '' ? {} : (JSON.parse(text) as Record<string, unknown>) };
}

function errorOf(json: Record<string, unknown>): { message: string; param: string | null } {
  return json['error'] as { message: string; param: string | null };
}

describe('tokenize, detokenize, models, version', () => {
  let s: Served;
  before(async () => {
    s = await serveTiny({}, false);
  });
  after(() => stop(s));

  it('/tokenize gives the ids /v1/completions and /v1/chat/completions compute on', async () => {
    const prompt = 'Tokenize me, please.';
    const tok = await post(`${s.url}/tokenize`, { model: 'tiny', prompt, return_token_strs: true });
    assert.equal(tok.status, 200);
    const ids = s.engine.tokenizer.encode(prompt);
    assert.deepEqual(tok.json, {
      count: ids.length,
      max_model_len: 128,
      tokens: ids,
      token_strs: ids.map((id) => s.engine.tokenizer.decode([id])),
    });
    const gen = await post(`${s.url}/v1/completions`, { prompt, max_tokens: 1 });
    assert.equal((gen.json['usage'] as { prompt_tokens: number }).prompt_tokens, tok.json['count']);
    const plain = await post(`${s.url}/tokenize`, { prompt, add_special_tokens: false });
    assert.deepEqual(plain.json['tokens'], ids.slice(1), 'without BOS');
    assert.equal(plain.json['token_strs'], null);

    const messages = [{ role: 'user', content: 'Hello there' }];
    const chat = await post(`${s.url}/tokenize`, { messages });
    const chatGen = await post(`${s.url}/v1/chat/completions`, { messages, max_tokens: 1 });
    assert.equal(chat.status, 200);
    assert.equal((chatGen.json['usage'] as { prompt_tokens: number }).prompt_tokens, chat.json['count']);
    const withBos = await post(`${s.url}/tokenize`, { messages, add_special_tokens: true });
    assert.deepEqual(withBos.json['tokens'], [
      s.engine.tokenizer.bosTokenId,
      ...(chat.json['tokens'] as number[]),
    ]);
  });

  it('/detokenize inverts /tokenize', async () => {
    const tok = await post(`${s.url}/tokenize`, { prompt: 'round trip ü', add_special_tokens: false });
    const detok = await post(`${s.url}/detokenize`, { model: 'tiny', tokens: tok.json['tokens'] });
    assert.deepEqual(detok, { status: 200, json: { prompt: 'round trip ü' } });
  });

  it('bad input is a 4xx naming the field; the server keeps serving', async () => {
    const cases: Array<[string, unknown, number, string]> = [
      ['/tokenize', { prompt: 42 }, 400, 'prompt'],
      ['/tokenize', {}, 400, 'prompt'],
      ['/tokenize', { prompt: 'x', model: 'gpt-4' }, 404, 'model'],
      ['/tokenize', { prompt: 'x', return_token_strs: 'sometimes' }, 400, 'return_token_strs'],
      ['/tokenize', { prompt: 'x'.repeat(200) }, 400, 'prompt'],
      ['/tokenize', { messages: 'hi' }, 400, 'messages'],
      [
        '/tokenize',
        { messages: [{ role: 'user', content: 'x' }], continue_final_message: true },
        400,
        'continue_final_message',
      ],
      [
        '/tokenize',
        { messages: [{ role: 'user', content: 'x' }], chat_template: '{{x}}' },
        400,
        'chat_template',
      ],
      ['/tokenize', '{not json', 400, ''],
      ['/detokenize', { tokens: [1, -2] }, 400, 'tokens'],
      ['/detokenize', { tokens: 'abc' }, 400, 'tokens'],
      ['/detokenize', { tokens: [1e9] }, 400, 'tokens'],
      ['/detokenize', { tokens: [1], model: 'other' }, 404, 'model'],
      ['/v1/completions', { prompt: 'x', max_tokens: 2, min_tokens: 3 }, 400, 'min_tokens'],
      ['/v1/completions', { prompt: 'x', max_tokens: 2, min_tokens: 'a' }, 400, 'min_tokens'],
    ];
    for (const [path, body, status, param] of cases) {
      const r = await post(`${s.url}${path}`, body);
      assert.equal(r.status, status, `${path} ${JSON.stringify(body).slice(0, 80)}`);
      if (param) assert.equal(errorOf(r.json).param, param, JSON.stringify(r.json));
    }
    const ok = await post(`${s.url}/tokenize`, { prompt: 'still up' });
    assert.equal(ok.status, 200);
    const nullMin = await post(`${s.url}/v1/completions`, { prompt: 'x', max_tokens: 2, min_tokens: null });
    assert.equal(nullMin.status, 200, 'min_tokens null (as the toy proxy sends it) is accepted');
    const get = await fetch(`${s.url}/tokenize`);
    assert.equal(get.status, 405);
    await get.text();
  });

  it("/v1/models has vLLM's ModelCard fields; /version answers", async () => {
    const res = await fetch(`${s.url}/v1/models`);
    const list = (await res.json()) as { object: string; data: Array<Record<string, unknown>> };
    assert.equal(list.object, 'list');
    const card = list.data[0]!;
    assert.deepEqual(Object.keys(card).sort(), [
      'created',
      'id',
      'max_model_len',
      'object',
      'owned_by',
      'parent',
      'permission',
      'root',
    ]);
    assert.equal(card['id'], 'tiny');
    assert.equal(card['object'], 'model');
    assert.equal(card['owned_by'], 'vllm');
    assert.equal(card['root'], 'tiny');
    assert.equal(card['parent'], null);
    assert.equal(card['max_model_len'], 128);
    const [perm] = card['permission'] as Array<Record<string, unknown>>;
    assert.match(String(perm!['id']), /^modelperm-[0-9a-f]{32}$/);
    assert.equal(perm!['object'], 'model_permission');
    assert.equal(perm!['allow_sampling'], true);
    assert.equal(perm!['organization'], '*');
    const version = (await (await fetch(`${s.url}/version`)).json()) as { version: string };
    assert.match(version.version, /^\d+\.\d+\.\d+/);
    const reset = await post(`${s.url}/reset_prefix_cache`, '');
    assert.equal(reset.status, 404, 'a development endpoint: absent without VLLM_SERVER_DEV_MODE');
  });
});

describe('POST /reset_prefix_cache (VLLM_SERVER_DEV_MODE)', () => {
  const prompt = 'A prompt long enough to fill a couple of sixteen-token blocks of the prefix cache.';
  const hits = async (s: Served): Promise<number> =>
    sampleValue(
      parseExposition(await (await fetch(`${s.url}/metrics`)).text()),
      'vllm:prefix_cache_hits_total',
    );

  it('clears the local prefix cache: the same prompt misses afterwards', async () => {
    const s = await serveTiny({}, true);
    try {
      await post(`${s.url}/v1/completions`, { prompt, max_tokens: 1 });
      await post(`${s.url}/v1/completions`, { prompt, max_tokens: 1 });
      const before = await hits(s);
      assert.ok(before > 0, 'the repeat hit the cache');
      const r = await fetch(`${s.url}/reset_prefix_cache`, { method: 'POST' });
      assert.equal(r.status, 200);
      assert.equal(await r.text(), '');
      await post(`${s.url}/v1/completions`, { prompt, max_tokens: 1 });
      assert.equal(await hits(s), before, 'no hit after the reset');
      const bad = await fetch(`${s.url}/reset_prefix_cache?reset_external=maybe`, { method: 'POST' });
      assert.equal(bad.status, 400);
      assert.equal(errorOf((await bad.json()) as Record<string, unknown>).param, 'reset_external');
    } finally {
      await stop(s);
    }
  });

  it('with a request running: refused, unless reset_running_requests preempts it (its output is unchanged)', async () => {
    const s = await serveTiny({}, true);
    const reference = await serveTiny({}, false);
    try {
      // Long enough (100 steps) that the reset arrives while it runs.
      const body = { prompt: 'Preempt me.', max_tokens: 100, ignore_eos: true, temperature: 0 };
      const plain = await post(`${reference.url}/v1/completions`, body);
      assert.equal(plain.status, 200, JSON.stringify(plain.json));
      const expected = plain.json['choices'];
      await post(`${s.url}/v1/completions`, { prompt, max_tokens: 1 });
      const running = post(`${s.url}/v1/completions`, body);
      await waitRunning(s.engine);
      assert.equal(await s.engine.resetPrefixCache({}), false, 'blocks in use');
      const r = await fetch(`${s.url}/reset_prefix_cache?reset_running_requests=true`, { method: 'POST' });
      assert.equal(r.status, 200);
      await r.text();
      const out = await running;
      assert.equal(out.status, 200);
      assert.deepEqual(out.json['choices'], expected, 'preempted and recomputed: same tokens');
      assert.ok(s.engine.stats().numPreemptionsTotal >= 1);
    } finally {
      await stop(s);
      await stop(reference);
    }
  });

  it("reset_external also clears the OffloadingConnector's CPU tier", async () => {
    const s = await serveTiny(
      {
        enable_prefix_caching: false,
        kv_transfer_config: {
          kv_connector: 'OffloadingConnector',
          kv_role: 'kv_both',
          kv_connector_extra_config: { cpu_bytes_to_use: 16 << 20 },
        },
      },
      true,
    );
    try {
      const external = () => s.engine.stats().externalPrefixCacheHitsTotal;
      await post(`${s.url}/v1/completions`, { prompt, max_tokens: 1 });
      await post(`${s.url}/v1/completions`, { prompt, max_tokens: 1 });
      const loaded = external();
      assert.ok(loaded > 0, 'the repeat loaded from the CPU tier');
      await (await fetch(`${s.url}/reset_prefix_cache`, { method: 'POST' })).text();
      await post(`${s.url}/v1/completions`, { prompt, max_tokens: 1 });
      assert.ok(external() > loaded, 'without reset_external the CPU tier still answers');
      const after = external();
      await (await fetch(`${s.url}/reset_prefix_cache?reset_external=true`, { method: 'POST' })).text();
      await post(`${s.url}/v1/completions`, { prompt, max_tokens: 1 });
      assert.equal(external(), after, 'the CPU tier was cleared');
    } finally {
      await stop(s);
    }
  });
});

async function waitRunning(engine: AsyncEngine): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (engine.stats().numRequestsRunning === 0) {
    assert.ok(Date.now() < deadline, 'the request started running');
    await new Promise((r) => setTimeout(r, 1));
  }
}
