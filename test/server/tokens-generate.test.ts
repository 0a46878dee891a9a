/**
 * vLLM's tokens-in, tokens-out POST /inference/v1/generate through real servers: the same
 * greedy token ids as /v1/completions for the same prompt ids (plain and streamed), vLLM's
 * response and chunk shapes (request_id `generate-tokens-<id>`, token ids per choice, usage,
 * logprobs named `token_id:N`), its 400s, the server's max_tokens default (fill the context),
 * and prefill/decode through a NixlConnector pair with top-level kv_transfer_params (and in
 * sampling_params.extra_args, which llm-d-inference-sim also accepts).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { type Served, serve, servePdTrio, stop } from './helpers/served.ts';

setLogLevel('error');

async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

interface TokensChoice {
  index: number;
  token_ids: number[];
  finish_reason: string | null;
  logprobs: {
    content: Array<{ token: string; logprob: number; top_logprobs: Array<{ token: string }> }>;
  } | null;
}

interface TokensResponse {
  request_id: string;
  model: string;
  choices: TokensChoice[];
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  kv_transfer_params: Record<string, unknown> | null;
}

async function sseJson(res: Response): Promise<Array<Record<string, unknown>>> {
  const events = (await res.text())
    .split('\n\n')
    .filter((e) => e.startsWith('data: '))
    .map((e) => e.slice(6));
  assert.equal(events.at(-1), '[DONE]');
  return events.slice(0, -1).map((e) => JSON.parse(e) as Record<string, unknown>);
}

const promptText = 'And God said, Let there be light: and there was light.';

describe('POST /inference/v1/generate', () => {
  let s: Served;
  let promptIds: number[];
  let expected: number[];
  before(async () => {
    s = await serve({ max_model_len: 128, num_gpu_blocks: 64 });
    promptIds = s.engine.tokenizer.encode(promptText);
    const plain = await post(`${s.url}/v1/completions`, {
      prompt: promptIds,
      max_tokens: 10,
      temperature: 0,
      ignore_eos: true,
      return_token_ids: true,
    });
    expected = ((await plain.json()) as { choices: Array<{ token_ids: number[] }> }).choices[0]!.token_ids;
    assert.equal(expected.length, 10);
  });
  after(() => stop(s));

  const sampling = { max_tokens: 10, temperature: 0, ignore_eos: true };

  it("answers the completions endpoint's tokens in vLLM's GenerateResponse", async () => {
    const res = await post(`${s.url}/inference/v1/generate`, {
      request_id: 'abc',
      token_ids: promptIds,
      sampling_params: sampling,
    });
    assert.equal(res.status, 200);
    const body = (await res.json()) as TokensResponse;
    assert.match(body.request_id, /^generate-tokens-abc/);
    assert.equal(body.model, s.engine.config.model.servedModelName);
    assert.deepEqual(
      body.choices.map((c) => [c.index, c.token_ids, c.finish_reason, c.logprobs]),
      [[0, expected, 'length', null]],
    );
    assert.deepEqual(body.usage, {
      prompt_tokens: promptIds.length,
      completion_tokens: 10,
      total_tokens: promptIds.length + 10,
    });
    assert.equal(body.kv_transfer_params, null);
  });

  it('streams the same tokens; finish_reason on the last chunk; usage chunk with no choices', async () => {
    const res = await post(`${s.url}/inference/v1/generate`, {
      token_ids: promptIds,
      sampling_params: sampling,
      stream: true,
      stream_options: { include_usage: true },
    });
    assert.equal(res.status, 200);
    const chunks = await sseJson(res);
    const usage = chunks.at(-1) as { choices: unknown[]; usage: { completion_tokens: number } };
    assert.deepEqual(usage.choices, []);
    assert.equal(usage.usage.completion_tokens, 10);
    const parts = chunks.slice(0, -1) as unknown as Array<{ request_id: string; choices: TokensChoice[] }>;
    assert.ok(
      parts.every((c) => c.choices[0]!.token_ids.length > 0),
      'no chunk without tokens',
    );
    assert.deepEqual(
      parts.flatMap((c) => c.choices[0]!.token_ids),
      expected,
    );
    assert.equal(parts.at(-1)?.choices[0]?.finish_reason, 'length');
    assert.ok(parts.slice(0, -1).every((c) => c.choices[0]!.finish_reason === null));
    assert.ok(parts.every((c) => c.request_id === parts[0]!.request_id));
  });

  it('logprobs name tokens token_id:N with at least the sampled entry', async () => {
    for (const n of [0, 2]) {
      const res = await post(`${s.url}/inference/v1/generate`, {
        token_ids: promptIds,
        sampling_params: { ...sampling, max_tokens: 3, logprobs: n },
      });
      const choice = ((await res.json()) as TokensResponse).choices[0]!;
      const content = choice.logprobs?.content ?? [];
      assert.deepEqual(
        content.map((c) => c.token),
        choice.token_ids.map((id) => `token_id:${id}`),
      );
      assert.ok(content.every((c) => c.top_logprobs.length === Math.max(n, 1)));
      assert.ok(
        content.every((c) => c.top_logprobs[0]!.token === c.token),
        'greedy: the sampled token leads',
      );
    }
  });

  it('without max_tokens the answer may fill the context', async () => {
    const res = await post(`${s.url}/inference/v1/generate`, {
      token_ids: promptIds,
      sampling_params: { temperature: 0, ignore_eos: true },
    });
    const body = (await res.json()) as TokensResponse;
    assert.equal(body.usage.completion_tokens, 128 - promptIds.length);
  });

  it("answers bad requests with vLLM's 400s and keeps serving", async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ sampling_params: sampling }, 'token_ids'],
      [{ token_ids: promptIds }, 'sampling_params'],
      [{ token_ids: [-1], sampling_params: sampling }, 'token_ids'],
      [{ token_ids: promptIds, sampling_params: sampling, priority: 1 }, 'priority'],
      [{ token_ids: promptIds, sampling_params: { ...sampling, temperature: -1 } }, 'temperature'],
    ];
    for (const [body, param] of cases) {
      const res = await post(`${s.url}/inference/v1/generate`, body);
      assert.equal(res.status, 400, JSON.stringify(body));
      const error = ((await res.json()) as { error: { param: string; code: number } }).error;
      assert.deepEqual([error.param, error.code], [param, 400]);
    }
    const missing = await post(`${s.url}/inference/v1/generate`, { sampling_params: sampling });
    assert.match(await missing.text(), /Missing input token_ids/);
    const ok = await post(`${s.url}/inference/v1/generate`, { token_ids: [1, 2], sampling_params: sampling });
    assert.equal(ok.status, 200);
  });
});

describe('prefill/decode through /inference/v1/generate', () => {
  let plain: Served;
  let prefill: Served;
  let decode: Served;
  before(async () => {
    ({ plain, prefill, decode } = await servePdTrio());
  });
  after(() => stop(plain, prefill, decode));

  for (const where of ['top level', 'sampling_params.extra_args'] as const) {
    it(`moves the KV with kv_transfer_params at the ${where}; tokens equal a plain engine's`, async () => {
      const ids = plain.engine.tokenizer.encode(`${promptText} ${where} twice over, ${promptText}`);
      const sampling = { max_tokens: 12, temperature: 0, ignore_eos: true };
      const reference = (await (
        await post(`${plain.url}/inference/v1/generate`, { token_ids: ids, sampling_params: sampling })
      ).json()) as TokensResponse;
      const carry = (params: Record<string, unknown>, sp: Record<string, unknown>) =>
        where === 'top level'
          ? { kv_transfer_params: params, sampling_params: sp }
          : { sampling_params: { ...sp, extra_args: { kv_transfer_params: params } } };
      const p = await post(`${prefill.url}/inference/v1/generate`, {
        token_ids: ids,
        ...carry({ do_remote_decode: true }, { ...sampling, max_tokens: 1 }),
      });
      assert.equal(p.status, 200);
      const pBody = (await p.json()) as TokensResponse;
      assert.equal(pBody.kv_transfer_params?.['do_remote_prefill'], true);
      const loadedBefore = decode.engine.stats().externalPrefixCacheHitsTotal;
      const d = await post(`${decode.url}/inference/v1/generate`, {
        token_ids: ids,
        ...carry(pBody.kv_transfer_params!, sampling),
      });
      assert.equal(d.status, 200);
      const dBody = (await d.json()) as TokensResponse;
      assert.deepEqual(dBody.choices[0]?.token_ids, reference.choices[0]?.token_ids);
      const loaded = decode.engine.stats().externalPrefixCacheHitsTotal - loadedBefore;
      assert.ok(loaded > 0, 'the decode server loaded the prompt through the connector');
    });
  }
});
