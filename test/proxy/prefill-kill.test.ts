/**
 * The prefill server really dies (SIGKILL) in the middle of a burst behind the proxy:
 * every client request still succeeds, with the tokens a single engine produces. Requests
 * whose P leg was cut, and those sent after P died, are served by the decode server alone
 * (the proxy's fallback); those whose KV D was about to pull recompute it on D
 * (kv_load_failure_policy=recompute).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { LLM } from '../../src/engine/llm.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { resolveProxyOptions, startProxy } from '../../src/proxy/index.ts';
import { createServer } from '../../src/server/index.ts';
import { serveProcess, tinyServeArgs } from '../helpers/serve-process.ts';

setLogLevel('error');

const MAX_TOKENS = 8;
const WAVE = 10;
const prompts = Array.from(
  { length: 2 * WAVE },
  (_, i) => `Request ${i}: disaggregated serving keeps going when the prefill server dies, number ${i * 7}.`,
);

function startPrefill(): ReturnType<typeof serveProcess> {
  const transfer = {
    kv_connector: 'NixlConnector',
    kv_role: 'kv_producer',
    engine_id: 'kill-p',
    kv_connector_extra_config: { backends: ['TCP'], side_channel_port: 0 },
  };
  return serveProcess(tinyServeArgs({ numGpuBlocks: 256, maxModelLen: 256, transfer }));
}

async function complete(url: string, prompt: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', prompt, max_tokens: MAX_TOKENS, temperature: 0, ignore_eos: true }),
  });
  const json = (await res.json()) as { choices?: { text: string }[] };
  return { status: res.status, text: json.choices?.[0]?.text ?? JSON.stringify(json) };
}

test('SIGKILL of the prefill server mid-burst: 0 failed requests, tokens as one engine gives them', async () => {
  const llm = await LLM.create({ model: 'tiny', num_gpu_blocks: 256, max_model_len: 256 });
  const expected = (
    await llm.generate(prompts, { maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true })
  ).map((o) => o.text);
  await llm.shutdown();

  const p = await startPrefill();
  const engine = await AsyncEngine.create({
    model: 'tiny',
    num_gpu_blocks: 256,
    max_model_len: 256,
    kv_transfer_config: {
      kv_connector: 'NixlConnector',
      kv_role: 'kv_consumer',
      engine_id: 'kill-d',
      kv_load_failure_policy: 'recompute',
      kv_connector_extra_config: { backends: ['TCP'], side_channel_port: 0, transfer_timeout: 5 },
    },
  });
  const d = createServer({ engine });
  const { url: dUrl } = await d.start('127.0.0.1', 0);
  const proxy = await startProxy(
    resolveProxyOptions({
      prefill: [p.url],
      decode: [dUrl],
      port: 0,
      healthIntervalMs: 200,
      // D is busy recomputing under load; only P's death is under test.
      healthTimeoutMs: 30_000,
    }),
  );
  try {
    const first = prompts.slice(0, WAVE).map((prompt) => complete(proxy.url, prompt));
    // Kill P once the burst is under way: the first disaggregated answer is back, the rest in flight.
    await Promise.race(first);
    p.proc.kill('SIGKILL');
    const second = prompts.slice(WAVE).map((prompt) => complete(proxy.url, prompt));
    const results = await Promise.all([...first, ...second]);
    const failed = results.filter((r) => r.status !== 200);
    assert.equal(failed.length, 0, `failed: ${JSON.stringify(failed)}`);
    assert.deepEqual(
      results.map((r) => r.text),
      expected,
      'token-identical to one engine',
    );
    const metrics = await (await fetch(`${proxy.url}/metrics`)).text();
    const fallbacks = metrics
      .split('\n')
      .filter((l) => l.startsWith('kvconnect:proxy_prefill_fallbacks_total{'))
      .reduce((n, l) => n + Number(l.split(' ').at(-1)), 0);
    assert.ok(fallbacks >= WAVE, `the requests after the kill fell back (${fallbacks})`);
    assert.match(metrics, /kvconnect:proxy_requests_total\{flow="disaggregated"\} [1-9]/);
  } finally {
    p.proc.kill('SIGKILL');
    await proxy.close();
    await d.close();
    await engine.shutdown();
  }
});
