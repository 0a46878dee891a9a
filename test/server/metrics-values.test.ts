/**
 * What the vLLM families count, checked against the traffic that produced them: prompt
 * tokens by source (computed, local prefix hit), per-request phase timings that add up,
 * one inter-token latency per token after the first, iteration tokens = prompt + generated,
 * every finish reason (stop, length, abort, error) and preemptions.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { waitFor } from './helpers/harness.ts';
import { type Exposition, parseExposition, sampleValue } from './helpers/prom-text.ts';
import { type Served, serve, stop } from './helpers/served.ts';

setLogLevel('error');

function post(url: string, body: Record<string, unknown>, signal?: AbortSignal): Promise<Response> {
  return fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ temperature: 0, ...body }),
    ...(signal ? { signal } : {}),
  });
}

async function scrape(s: Served): Promise<Exposition> {
  return parseExposition(await (await fetch(`${s.url}/metrics`)).text());
}

const v = sampleValue;
const bySource = (exp: Exposition, source: string): number =>
  v(exp, 'vllm:prompt_tokens_by_source_total', { source });

describe('vLLM metric values', () => {
  let s: Served;
  before(async () => {
    s = await serve({ num_gpu_blocks: 64, block_size: 16 });
  });
  after(() => stop(s));

  it('prompt tokens by source, phase timings, latencies and iteration tokens add up', async () => {
    const prompt = 'Every finished request is counted once, with the phases it went through on the way.';
    const len = s.engine.tokenizer.encode(prompt).length;
    assert.ok(len > 32, 'two full blocks or more');
    const first = await post(s.url, { prompt, max_tokens: 5, ignore_eos: true });
    assert.equal(first.status, 200);
    await first.json();
    let exp = await scrape(s);
    assert.equal(v(exp, 'vllm:prompt_tokens_total'), len);
    assert.equal(bySource(exp, 'local_compute'), len);
    assert.equal(bySource(exp, 'local_cache_hit'), 0);
    assert.equal(v(exp, 'vllm:generation_tokens_total'), 5);
    assert.equal(v(exp, 'vllm:request_success_total', { finished_reason: 'length' }), 1);
    assert.equal(v(exp, 'vllm:time_to_first_token_seconds_count'), 1);
    assert.equal(v(exp, 'vllm:inter_token_latency_seconds_count'), 4, 'one per token after the first');
    assert.equal(v(exp, 'vllm:request_time_per_output_token_seconds_count'), 1);
    for (const phase of ['queue', 'prefill', 'decode', 'inference'])
      assert.equal(v(exp, `vllm:request_${phase}_time_seconds_count`), 1, phase);
    const prefill = v(exp, 'vllm:request_prefill_time_seconds_sum');
    const decode = v(exp, 'vllm:request_decode_time_seconds_sum');
    assert.ok(Math.abs(v(exp, 'vllm:request_inference_time_seconds_sum') - prefill - decode) < 1e-9);
    assert.ok(
      Math.abs(decode - v(exp, 'vllm:inter_token_latency_seconds_sum')) < 1e-9,
      'decode time is the sum of the inter-token latencies',
    );
    assert.ok(Math.abs(v(exp, 'vllm:request_time_per_output_token_seconds_sum') - decode / 4) < 1e-9);
    assert.ok(
      v(exp, 'vllm:e2e_request_latency_seconds_sum') >=
        v(exp, 'vllm:request_queue_time_seconds_sum') + prefill,
    );
    assert.equal(
      v(exp, 'vllm:iteration_tokens_total_sum'),
      v(exp, 'vllm:prompt_tokens_total') + v(exp, 'vllm:generation_tokens_total'),
    );
    assert.equal(v(exp, 'vllm:request_prompt_tokens_sum'), len);
    assert.equal(v(exp, 'vllm:request_generation_tokens_sum'), 5);
    assert.equal(v(exp, 'vllm:request_params_max_tokens_sum'), 5);
    assert.equal(v(exp, 'vllm:request_prefill_kv_computed_tokens_sum'), len);

    // The same prompt again: its full blocks come from the local prefix cache.
    const again = await post(s.url, { prompt, max_tokens: 1 });
    await again.json();
    exp = await scrape(s);
    const hit = Math.floor(len / 16) * 16 === len ? len - 16 : Math.floor(len / 16) * 16;
    assert.equal(bySource(exp, 'local_cache_hit'), hit);
    assert.equal(bySource(exp, 'local_compute'), len + (len - hit));
    assert.equal(v(exp, 'vllm:prompt_tokens_cached_total'), hit);
    assert.equal(v(exp, 'vllm:prefix_cache_hits_total'), hit);
    assert.equal(v(exp, 'vllm:request_prefill_kv_computed_tokens_sum'), len + (len - hit));
    assert.equal(v(exp, 'vllm:request_time_per_output_token_seconds_count'), 1, 'one token: no TPOT');
  });

  it('every finish reason has a series; stop, length and abort are counted', async () => {
    let exp = await scrape(s);
    for (const reason of ['stop', 'length', 'abort', 'error', 'repetition'])
      assert.ok(v(exp, 'vllm:request_success_total', { finished_reason: reason }) >= 0, reason);
    const stops = v(exp, 'vllm:request_success_total', { finished_reason: 'stop' });
    const aborts = v(exp, 'vllm:request_success_total', { finished_reason: 'abort' });

    // The request's own second token, named as a stop token, ends it with 'stop'.
    const probe = (await (
      await post(s.url, {
        prompt: 'stop here',
        max_tokens: 2,
        ignore_eos: true,
        logprobs: 0,
        return_tokens_as_token_ids: true,
      })
    ).json()) as { choices: Array<{ logprobs: { tokens: string[] } }> };
    const second = Number(probe.choices[0]!.logprobs.tokens[1]!.slice('token_id:'.length));
    const stopped = await post(s.url, { prompt: 'stop here', max_tokens: 8, stop_token_ids: [second] });
    const body = (await stopped.json()) as { choices: Array<{ finish_reason: string }> };
    assert.equal(body.choices[0]!.finish_reason, 'stop');

    // A client that goes away mid-stream aborts its request.
    const controller = new AbortController();
    const res = await post(
      s.url,
      { prompt: 'abort me', max_tokens: 200, ignore_eos: true, stream: true },
      controller.signal,
    );
    const reader = res.body!.getReader();
    await reader.read();
    controller.abort();
    await reader.cancel().catch(() => {});
    await waitFor(
      async () => {
        exp = await scrape(s);
        return v(exp, 'vllm:request_success_total', { finished_reason: 'abort' }) === aborts + 1;
      },
      10_000,
      'the abort to be counted',
    );
    assert.equal(v(exp, 'vllm:request_success_total', { finished_reason: 'stop' }), stops + 1);
  });
});

describe('vLLM metric values under pressure and failure', () => {
  it('preemptions: a pool too small for every running request', async () => {
    // 8 usable blocks of 16 tokens; 4 requests growing to 100 tokens cannot all stay.
    const small = await serve({ num_gpu_blocks: 9, block_size: 16, max_num_seqs: 4, max_model_len: 128 });
    try {
      const prompts = ['one two three', 'four five six', 'seven eight nine', 'ten eleven twelve'];
      const all = await Promise.all(
        prompts.map((prompt) => post(small.url, { prompt, max_tokens: 90, ignore_eos: true })),
      );
      for (const r of all) assert.equal(r.status, 200);
      await Promise.all(all.map((r) => r.json()));
      const exp = await scrape(small);
      assert.ok(v(exp, 'vllm:num_preemptions_total') > 0, 'the scheduler preempted');
      assert.equal(v(exp, 'vllm:request_success_total', { finished_reason: 'length' }), 4);
      assert.equal(v(exp, 'vllm:generation_tokens_total'), 360, 'a preempted request is not counted twice');
    } finally {
      await stop(small);
    }
  });

  it("error: a KV load that fails under kv_load_failure_policy 'fail'", async () => {
    const d = await serve({
      num_gpu_blocks: 64,
      kv_transfer_config: {
        kv_connector: 'NixlConnector',
        kv_role: 'kv_consumer',
        kv_load_failure_policy: 'fail',
        kv_connector_extra_config: { backends: ['TCP'], side_channel_port: 0 },
      },
    });
    try {
      const prompt = 'This prompt was never prefilled anywhere, so its KV cannot be read from a peer.';
      const res = await post(d.url, {
        prompt,
        max_tokens: 4,
        kv_transfer_params: {
          do_remote_prefill: true,
          remote_engine_id: 'nobody',
          remote_block_ids: [1, 2, 3, 4, 5],
          remote_host: '127.0.0.1',
          remote_port: 9,
          remote_request_id: 'gone',
        },
      });
      assert.equal(res.status, 500, await res.text());
      const exp = await scrape(d);
      assert.equal(v(exp, 'vllm:request_success_total', { finished_reason: 'error' }), 1);
      assert.equal(v(exp, 'vllm:e2e_request_latency_seconds_count'), 1);
      // It waited for remote KV and never ran: as in vLLM, no phase timings at all.
      assert.equal(v(exp, 'vllm:request_queue_time_seconds_count'), 0);
      assert.equal(v(exp, 'vllm:request_prefill_time_seconds_count'), 0);
    } finally {
      await stop(d);
    }
  });
});
