/**
 * A router's view of LoRA adapters (emulation without weights: adapters are names): a
 * server's BlockStored events carry lora_id / lora_name, the proxy's kv_aware index holds an
 * adapter's blocks under hashes keyed by the adapter's name, so a request for the same prompt
 * matches only the blocks of its own adapter (the base model's and other adapters' blocks do
 * not count), and vllm:lora_requests_info shows the adapter running.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { buildEmulationConfig } from '../../src/config/emulation-config.ts';
import { buildEngineConfig } from '../../src/config/engine-config.ts';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { KVEventSubscriber } from '../../src/kv-events/subscriber.ts';
import type { BlockStoredEvent } from '../../src/kv-events/wire.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { type RunningProxy, resolveProxyOptions, startProxy } from '../../src/proxy/index.ts';
import { PromptBlockHasher } from '../../src/proxy/prompt-blocks.ts';
import { createServer, type KVServer } from '../../src/server/index.ts';
import { loadTokenizer } from '../../src/tokenizer/load.ts';

setLogLevel('error');

const PROMPT =
  'A shared system prompt, long enough to fill a few sixteen-token blocks, that every tenant sends first. ';

let engine: AsyncEngine;
let server: KVServer;
let url: string;
let proxy: RunningProxy;
let sub: KVEventSubscriber;
const stored: BlockStoredEvent[] = [];

before(async () => {
  const config = buildEngineConfig({
    model: 'tiny',
    num_gpu_blocks: 128,
    max_model_len: 512,
    enable_lora: true,
    max_loras: 2,
    kv_events_config: {
      enable_kv_cache_events: true,
      endpoint: 'tcp://127.0.0.1:*',
      replay_endpoint: 'tcp://127.0.0.1:*',
    },
  });
  config.emulation = buildEmulationConfig({ mode: 'random' }, config.model.seed);
  engine = await AsyncEngine.create(config);
  server = createServer({
    engine,
    lora: {
      modules: ['sql', 'poetry'].map((name) => ({ name, path: `/adapters/${name}`, baseModelName: null })),
      allowedDirs: [],
    },
  });
  ({ url } = await server.start('127.0.0.1', 0));
  const info = engine.kvEventsInfo()!;
  sub = KVEventSubscriber.start({
    endpoint: info.endpoint,
    replayEndpoint: info.replay_endpoint,
    onBatch: (b) => {
      for (const e of b.events) if (e.type === 'BlockStored') stored.push(e);
    },
  });
  proxy = await startProxy(
    resolveProxyOptions({
      prefill: [],
      decode: [url],
      port: 0,
      policy: 'kv_aware',
      tokenizer: 'tiny',
      healthIntervalMs: 60_000,
    }),
  );
});

after(async () => {
  await proxy.close();
  await sub.close();
  await server.close();
  await engine.shutdown();
});

async function complete(model: string): Promise<void> {
  const res = await fetch(`${proxy.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt: PROMPT, max_tokens: 2 }),
  });
  const text = await res.text();
  assert.equal(res.status, 200, text);
}

async function until(cond: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const start = Date.now();
  while (!cond()) {
    if (Date.now() - start > timeoutMs) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test("the kv_aware index keeps adapters apart; events carry the adapter's id and name", async () => {
  const hasher = new PromptBlockHasher(loadTokenizer('tiny'));
  const body = { prompt: PROMPT };
  const hashesOf = (lora?: string) => hasher.hashes(body, 16, 'sha256_cbor', undefined, lora);
  const index = () => proxy.kvEvents!.index;
  const held = (lora?: string) => index().prefixLength(url, hashesOf(lora));
  const n = hashesOf().length;
  assert.ok(n >= 3, 'several full blocks');

  await complete('sql');
  await until(() => held('sql') === n, "the proxy learnt sql's blocks");
  assert.equal(held(), 0, 'the base model holds none of them');
  assert.equal(held('poetry'), 0, 'nor does the other adapter');
  const sqlEvents = stored.filter((e) => e.loraName === 'sql');
  assert.ok(sqlEvents.length > 0);
  for (const e of sqlEvents) assert.equal(e.loraId, 1);

  await complete('tiny');
  await until(() => held() === n, "the proxy learnt the base model's blocks");
  assert.ok(stored.some((e) => e.loraName === null && e.loraId === null));

  // Routed again: the same prompt for sql matches sql's cache; for poetry it matches nothing.
  await complete('sql');
  await complete('poetry');
  const metrics = await (await fetch(`${proxy.url}/metrics`)).text();
  assert.match(metrics, /kvconnect:proxy_kv_aware_routes_total\{matched="true"\} 1\b/);
  assert.match(metrics, /kvconnect:proxy_kv_aware_routes_total\{matched="false"\} 3\b/);
  await until(() => stored.some((e) => e.loraName === 'poetry' && e.loraId === 2), "poetry's events");

  const served = await (await fetch(`${url}/metrics`)).text();
  assert.match(
    served,
    /vllm:lora_requests_info\{max_lora="2",waiting_lora_adapters="",running_lora_adapters="sql"\} \d/,
  );
});
