/**
 * kv_aware against real kvconnect servers publishing KV events: the proxy computes the same
 * block hashes as the engines, routes a prompt to the server that holds its prefix, breaks
 * ties by load, and forgets a server that restarted (its event sequence starts again).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { KVEventSubscriber } from '../../src/kv-events/subscriber.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { type RunningProxy, resolveProxyOptions, startProxy } from '../../src/proxy/index.ts';
import { PromptBlockHasher } from '../../src/proxy/prompt-blocks.ts';
import { createServer, type KVServer } from '../../src/server/index.ts';
import { loadTokenizer } from '../../src/tokenizer/load.ts';

setLogLevel('error');

interface Served {
  engine: AsyncEngine;
  server: KVServer;
  url: string;
}

async function serve(endpoint = 'tcp://127.0.0.1:*', port = 0): Promise<Served> {
  const engine = await AsyncEngine.create({
    model: 'tiny',
    num_gpu_blocks: 128,
    max_model_len: 512,
    kv_events_config: { enable_kv_cache_events: true, endpoint, replay_endpoint: 'tcp://127.0.0.1:*' },
  });
  const server = createServer({ engine });
  const { url } = await server.start('127.0.0.1', port);
  return { engine, server, url };
}

async function stop(s: Served): Promise<void> {
  await s.server.close();
  await s.engine.shutdown();
}

async function complete(url: string, body: Record<string, unknown>): Promise<void> {
  const res = await fetch(`${url}/${'messages' in body ? 'v1/chat/completions' : 'v1/completions'}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', max_tokens: 2, temperature: 0, ...body }),
  });
  assert.equal(res.status, 200, await res.text());
}

async function until(cond: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const start = Date.now();
  while (!cond()) {
    if (Date.now() - start > timeoutMs) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const PREFIXES = [
  'Alpha: the first long shared system prompt that many requests of one tenant begin with. ',
  'Bravo: a second long shared prefix, written differently from the first one on purpose. ',
  'Charlie: a third prefix long enough to fill several sixteen-token blocks of the cache. ',
  'Delta: the fourth and last prefix used by this test, also several blocks long in total. ',
];

test("the proxy's prompt hashes are the engine's block hashes (completion, chat, cache_salt)", async () => {
  const s = await serve();
  const stored = new Set<bigint>();
  const info = s.engine.kvEventsInfo()!;
  const sub = KVEventSubscriber.start({
    endpoint: info.endpoint,
    replayEndpoint: info.replay_endpoint,
    onBatch: (b) => {
      for (const e of b.events) if (e.type === 'BlockStored') for (const h of e.blockHashes) stored.add(h);
    },
  });
  try {
    const hasher = new PromptBlockHasher(loadTokenizer('tiny'));
    const bodies = [
      { prompt: PREFIXES[0] },
      { prompt: PREFIXES[1], cache_salt: 'tenant-7' },
      {
        messages: [
          { role: 'system', content: PREFIXES[2] },
          { role: 'user', content: 'hi' },
        ],
      },
    ];
    for (const body of bodies) {
      const hashes = hasher.hashes(body, info.block_size, 'sha256_cbor');
      assert.ok(hashes.length >= 3, 'several full blocks');
      await complete(s.url, body);
      await until(
        () => hashes.every((h) => stored.has(h)),
        `the engine's BlockStored for ${JSON.stringify(body)}`,
      );
    }
    const salted = hasher.hashes(bodies[1]!, 16, 'sha256_cbor');
    const unsalted = hasher.hashes({ prompt: PREFIXES[1] }, 16, 'sha256_cbor');
    assert.notEqual(salted[0], unsalted[0], 'the salt changes the first block and, chained, all');
  } finally {
    await sub.close();
    await stop(s);
  }
});

describe('kv_aware routing over two servers', () => {
  let a: Served;
  let b: Served;
  let proxy: RunningProxy;
  const dir = mkdtempSync(join(tmpdir(), 'kvc-kvaware-'));
  const bEndpoint = `ipc://${join(dir, 'b.sock')}`;

  before(async () => {
    a = await serve();
    b = await serve(bEndpoint);
    proxy = await startProxy(
      resolveProxyOptions({
        prefill: [],
        decode: [a.url, b.url],
        port: 0,
        policy: 'kv_aware',
        tokenizer: 'tiny',
        healthIntervalMs: 60_000,
      }),
    );
  });

  after(async () => {
    await proxy.close();
    await stop(a);
    await stop(b);
    rmSync(dir, { recursive: true, force: true });
  });

  const servedBy = async (prompt: string): Promise<'a' | 'b'> => {
    const before = [a, b].map((s) => s.engine.stats().promptTokensTotal);
    await complete(proxy.url, { prompt });
    const after = [a, b].map((s) => s.engine.stats().promptTokensTotal);
    return after[0]! > before[0]! ? 'a' : 'b';
  };
  const index = () => proxy.kvEvents!.index;

  test('a prompt goes where its prefix is cached; unknown prefixes are spread by load and in turn', async () => {
    const first: ('a' | 'b')[] = [];
    for (const p of PREFIXES) {
      const known = [a, b].map((s) => index().size(s.url));
      first.push(await servedBy(`${p}first question`));
      // Wait until the proxy learnt the new blocks, so the next choice is informed.
      await until(
        () => index().size(a.url) + index().size(b.url) > known[0]! + known[1]!,
        'the KV events of the first request',
      );
    }
    assert.deepEqual(new Set(first), new Set(['a', 'b']), `idle servers take turns: ${first.join(',')}`);
    const hitsBefore = [a, b].map((s) => s.engine.stats().prefixCacheHitsTotal);
    for (const [i, p] of PREFIXES.entries()) {
      assert.equal(await servedBy(`${p}second question`), first[i], `prefix ${i} follows its cache`);
    }
    const hits = [a, b].map((s, i) => s.engine.stats().prefixCacheHitsTotal - hitsBefore[i]!);
    assert.ok(hits[0]! > 0 && hits[1]! > 0, `both servers hit their prefix cache: ${hits}`);
    const metrics = await (await fetch(`${proxy.url}/metrics`)).text();
    assert.match(metrics, /kvconnect:proxy_kv_aware_routes_total\{matched="true"\} 4/);
  });

  test('a restarted server is forgotten (its event sequence starts again)', async () => {
    const port = Number(new URL(b.url).port);
    const hasher = new PromptBlockHasher(loadTokenizer('tiny'));
    const onB = PREFIXES.map((p) => hasher.hashes({ prompt: p }, 16, 'sha256_cbor')).filter(
      (h) => index().prefixLength(b.url, h) > 0,
    );
    assert.ok(onB.length > 0, 'b holds some prefixes');
    await stop(b);
    b = await serve(bEndpoint, port);
    // Requests straight to the new b make it publish again, from sequence 0.
    for (let i = 0; onB.some((h) => index().prefixLength(b.url, h) > 0); i++) {
      if (i > 200) assert.fail('the restart was never noticed');
      await complete(b.url, { prompt: `unrelated prompt number ${i} of the new b` });
      await new Promise((r) => setTimeout(r, 20));
    }
    await until(() => index().size(b.url) > 0, 'the new b reported its own blocks');
    for (const h of onB) assert.equal(index().prefixLength(b.url, h), 0);
  });
});

test('a server restarted on other KV event ports is followed there (its /kvconnect/info, read each health round)', async () => {
  // Wildcard ports: the restarted server publishes (and replays) on new ones.
  let s = await serve();
  const port = Number(new URL(s.url).port);
  const proxy = await startProxy(
    resolveProxyOptions({
      prefill: [],
      decode: [s.url],
      port: 0,
      policy: 'kv_aware',
      tokenizer: 'tiny',
      healthIntervalMs: 100,
    }),
  );
  const index = proxy.kvEvents!.index;
  const hasher = new PromptBlockHasher(loadTokenizer('tiny'));
  try {
    const before = s.engine.kvEventsInfo()!.endpoint;
    await complete(s.url, { prompt: PREFIXES[0] });
    const old = hasher.hashes({ prompt: PREFIXES[0] }, 16, 'sha256_cbor');
    await until(() => index.prefixLength(s.url, old) > 0, "the first server's blocks");
    await stop(s);
    s = await serve('tcp://127.0.0.1:*', port);
    assert.notEqual(s.engine.kvEventsInfo()!.endpoint, before, 'the new server publishes elsewhere');
    const fresh = hasher.hashes({ prompt: PREFIXES[1] }, 16, 'sha256_cbor');
    // Until the proxy follows the new publisher, what it publishes reaches nobody: ask again.
    for (let i = 0; index.prefixLength(s.url, fresh) === 0; i++) {
      if (i > 200) assert.fail('the new publisher was never followed');
      await complete(s.url, { prompt: `${PREFIXES[1]}${i}` });
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(index.prefixLength(s.url, old), 0, "the old server's blocks are forgotten");
  } finally {
    await proxy.close();
    await stop(s);
  }
});
