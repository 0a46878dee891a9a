/**
 * `kvconnect proxy` drives the OffloadingConnector p2p flow against real `kvconnect serve`
 * processes, as llm-d's sidecar does with `--kv-connector=offloading`: the flow comes from
 * GET /kvconnect/info, P and D get their roles at once and D pulls the prompt from P's p2p
 * tier; with `x-kv-cache-source-host-port` naming a peer that holds the prefix, P pulls it
 * from that peer instead of computing it (and so does a decode server serving alone). Engines
 * running NixlConnector and the p2p tier in a
 * MultiConnector get the NIXL flow plus the pull. Token ids equal one plain engine's.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { LLM } from '../../src/engine/llm.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { type RunningProxy, resolveProxyOptions, startProxy } from '../../src/proxy/index.ts';
import { freePort } from '../helpers/free-port.ts';
import { type ServeProcess, serveProcess, tinyServeArgs } from '../helpers/serve-process.ts';

setLogLevel('error');

const MAX_TOKENS = 6;
const PROMPTS = [
  'The p2p tier moves the prompt from the prefill server to the decode server over the transfer agent.',
  'A peer that already holds this long shared prefix in its CPU tier serves it to the prefill server.',
  'NIXL moves this prompt from prefill to decode while the p2p tier pulls its cached prefix from a peer.',
  'With no prefill server the decode server pulls this cached prefix from the peer the router names.',
];

async function offloadingP2P(): Promise<Record<string, unknown>> {
  const port = await freePort();
  return {
    kv_connector: 'OffloadingConnector',
    kv_role: 'kv_both',
    kv_load_failure_policy: 'recompute',
    kv_connector_extra_config: {
      spec_name: 'TieringOffloadingSpec',
      cpu_bytes_to_use: 16 << 20,
      secondary_tiers: [{ type: 'p2p', host: '127.0.0.1', port, timeout_ms: 10_000 }],
    },
  };
}

/** NixlConnector for P/D and the OffloadingConnector's p2p tier for prefix pulls. */
async function nixlAndP2P(): Promise<Record<string, unknown>> {
  return {
    kv_connector: 'MultiConnector',
    kv_role: 'kv_both',
    kv_load_failure_policy: 'recompute',
    kv_connector_extra_config: {
      connectors: [
        {
          kv_connector: 'NixlConnector',
          kv_role: 'kv_both',
          kv_connector_extra_config: { backends: ['TCP'], side_channel_port: 0 },
        },
        await offloadingP2P(),
      ],
    },
  };
}

async function serveWith(transfer: Record<string, unknown>): Promise<{ url: string; proc: ServeProcess }> {
  return serveProcess(tinyServeArgs({ numGpuBlocks: 64, maxModelLen: 256, transfer }));
}

async function complete(
  url: string,
  prompt: string,
  headers: Record<string, string> = {},
): Promise<number[]> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({
      model: 'tiny',
      prompt,
      max_tokens: MAX_TOKENS,
      temperature: 0,
      ignore_eos: true,
      return_token_ids: true,
    }),
  });
  const json = (await res.json()) as { choices?: { token_ids?: number[] }[] };
  assert.equal(res.status, 200, JSON.stringify(json));
  return json.choices?.[0]?.token_ids ?? [];
}

/** A counter of a server's /metrics (summed over its label sets). */
async function counter(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith(`${name}{`) || line.startsWith(`${name} `)) sum += Number(line.split(' ').at(-1));
  }
  return sum;
}

let expected: number[][];
const servers: { url: string; proc: ServeProcess }[] = [];
let proxy: RunningProxy;

before(async () => {
  const llm = await LLM.create({ model: 'tiny', num_gpu_blocks: 64, max_model_len: 256 });
  expected = (await llm.generate(PROMPTS, { maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true })).map(
    (o) => o.tokenIds,
  );
  await llm.shutdown();
  // Every server runs NixlConnector and the p2p tier (a MultiConnector): one proxy is told to
  // drive the OffloadingConnector flow, the other follows /kvconnect/info (NixlConnector).
  servers.push(
    ...(await Promise.all([
      serveWith(await nixlAndP2P()),
      serveWith(await nixlAndP2P()),
      serveWith(await nixlAndP2P()),
    ])),
  );
  const [p, d, source] = servers as unknown as [{ url: string }, { url: string }, { url: string }];
  // The third server decodes too: a peer named by x-kv-cache-source-host-port is one of the pool's.
  proxy = await startProxy(
    resolveProxyOptions({
      prefill: [p.url],
      decode: [d.url, source.url],
      port: 0,
      policy: 'round_robin',
      kvConnector: 'OffloadingConnector',
    }),
  );
});

after(async () => {
  await proxy?.close();
  for (const s of servers) s.proc.kill('SIGKILL');
});

test('P/D through the p2p tier: D loads the prompt from P', async () => {
  const decoders = servers.slice(1);
  const hits = async () =>
    (await Promise.all(decoders.map((d) => counter(d.url, 'vllm:external_prefix_cache_hits_total')))).reduce(
      (a, b) => a + b,
    );
  const before = await hits();
  assert.deepEqual(await complete(proxy.url, PROMPTS[0]!), expected[0]);
  const loaded = (await hits()) - before;
  assert.ok(loaded >= 16, `D loaded the prompt from P's p2p tier (${loaded} tokens)`);
});

test('peer pull: x-kv-cache-source-host-port makes P pull the prefix from the peer that holds it', async () => {
  const [p, , source] = servers as unknown as [{ url: string }, { url: string }, { url: string }];
  // The source computes the prompt once: its CPU tier holds the prefix.
  assert.deepEqual(await complete(source.url, PROMPTS[1]!), expected[1]);
  const hitsBefore = await counter(p.url, 'vllm:external_prefix_cache_hits_total');
  const header = new URL(source.url).host;
  assert.deepEqual(
    await complete(proxy.url, PROMPTS[1]!, { 'x-kv-cache-source-host-port': header }),
    expected[1],
  );
  const hits = (await counter(p.url, 'vllm:external_prefix_cache_hits_total')) - hitsBefore;
  assert.ok(hits >= 16, `P pulled the prefix from the source (${hits} tokens)`);
});

test('NixlConnector + p2p tier in a MultiConnector: NIXL P/D, and P pulls the prefix from the named peer', async () => {
  const [p, d, source] = servers as unknown as [{ url: string }, { url: string }, { url: string }];
  const nixlProxy = await startProxy(
    resolveProxyOptions({ prefill: [p.url], decode: [d.url, source.url], port: 0 }),
  );
  try {
    const info = (await (await fetch(`${p.url}/kvconnect/info`)).json()) as Record<string, unknown>;
    assert.equal(info['connector'], 'NixlConnector', "the MultiConnector advertises its P/D child's flow");
    assert.equal(typeof info['p2p_base_port'], 'number', "and the p2p child's address");
    assert.deepEqual(await complete(source.url, PROMPTS[2]!), expected[2]);
    const hits = (url: string) => counter(url, 'vllm:external_prefix_cache_hits_total');
    const [pBefore, dBefore, sBefore] = await Promise.all([hits(p.url), hits(d.url), hits(source.url)]);
    const header = new URL(source.url).host;
    assert.deepEqual(
      await complete(nixlProxy.url, PROMPTS[2]!, { 'x-kv-cache-source-host-port': header }),
      expected[2],
    );
    const pulled = (await hits(p.url)) - pBefore;
    assert.ok(pulled >= 16, `P pulled the prefix from the source over the p2p tier (${pulled} tokens)`);
    const moved = (await hits(d.url)) - dBefore + (await hits(source.url)) - sBefore;
    assert.ok(moved >= 16, `D loaded the prompt from P over NIXL (${moved} tokens)`);
  } finally {
    await nixlProxy.close();
  }
});

test('decode only: x-kv-cache-source-host-port makes the decode server pull the prefix from the peer', async () => {
  const [, d, source] = servers as unknown as [{ url: string }, { url: string }, { url: string }];
  // The source is in the pool (the proxy learns its p2p socket from it); least_loaded sends a
  // lone request to the first decode server, D.
  const decodeOnly = await startProxy(
    resolveProxyOptions({
      prefill: [],
      decode: [d.url, source.url],
      port: 0,
      policy: 'least_loaded',
      kvConnector: 'OffloadingConnector',
    }),
  );
  try {
    assert.deepEqual(await complete(source.url, PROMPTS[3]!), expected[3]);
    const before = await counter(d.url, 'vllm:external_prefix_cache_hits_total');
    const servedBefore = await counter(d.url, 'vllm:request_success_total');
    const header = new URL(source.url).host;
    assert.deepEqual(
      await complete(decodeOnly.url, PROMPTS[3]!, { 'x-kv-cache-source-host-port': header }),
      expected[3],
    );
    assert.equal((await counter(d.url, 'vllm:request_success_total')) - servedBefore, 1, 'D served it');
    const pulled = (await counter(d.url, 'vllm:external_prefix_cache_hits_total')) - before;
    assert.ok(pulled >= 16, `D pulled the prefix from the source (${pulled} tokens)`);
  } finally {
    await decodeOnly.close();
  }
});
