/**
 * A router that starts late: the proxy's kv_aware index (KvEventsFeed + KvBlockIndex), started
 * after two engines served 10 000 requests and their replay buffers rolled over, rebuilds its
 * view from the publishers' snapshots (real ZeroMQ sockets) and then scores and routes every
 * prompt as a router that watched from the start; what the replay buffer alone still holds
 * would not. Across real processes: a `kvconnect serve` child process, a proxy started after
 * its requests, and the server restarted on the same endpoints (a new epoch: the proxy
 * resynchronises and keeps nothing of the old one).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import * as zmq from 'zeromq';
import { buildEmulationConfig } from '../../src/config/emulation-config.ts';
import { buildEngineConfig } from '../../src/config/engine-config.ts';
import { Engine } from '../../src/engine/engine.ts';
import { samplingParams } from '../../src/engine/sampling-params.ts';
import { END_SEQ, seqBytes } from '../../src/kv-events/endpoint.ts';
import type { ZmqEventPublisher } from '../../src/kv-events/publisher.ts';
import { KVEventSubscriber } from '../../src/kv-events/subscriber.ts';
import { decodeBatch } from '../../src/kv-events/wire.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { Backend } from '../../src/proxy/backend.ts';
import { resolveProxyOptions, startProxy } from '../../src/proxy/index.ts';
import { KvAwarePolicy } from '../../src/proxy/kv-aware-policy.ts';
import { KvEventsFeed } from '../../src/proxy/kv-events-feed.ts';
import { KvBlockIndex } from '../../src/proxy/kv-index.ts';
import { PromptBlockHasher } from '../../src/proxy/prompt-blocks.ts';
import { ProxyMetrics } from '../../src/proxy/proxy-metrics.ts';
import { loadTokenizer } from '../../src/tokenizer/load.ts';
import { type ServeProcess, serveProcess, tinyServeArgs } from '../helpers/serve-process.ts';

setLogLevel('error');

const REQUESTS = 10_000;
const BATCH = 250;
const PREFIXES = 200;
const BLOCK = 16;

async function until(cond: () => boolean, what: string, timeoutMs = 60_000): Promise<void> {
  const start = Date.now();
  while (!cond()) {
    if (Date.now() - start > timeoutMs) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Two shared blocks of prefix `k`, then `suffix` (one more full block and a token); the vocabulary has 272 ids. */
function prompt(k: number, suffix: number): number[] {
  const prefix = Array.from({ length: 2 * BLOCK }, (_, i) => 1 + ((k * 37 + i * 11) % 270));
  const tail = Array.from({ length: BLOCK + 1 }, (_, i) => 1 + ((suffix * 13 + i * 7) % 270));
  return [...prefix, ...tail];
}

const sorted = (m: ReadonlyMap<bigint, number>) => [...m].sort((a, b) => (a[0] < b[0] ? -1 : 1));

/** A router: the proxy's feed and kv_aware policy over `backends`. */
function router(backends: Backend[], hasher: PromptBlockHasher) {
  const feed = new KvEventsFeed(new KvBlockIndex(), {
    endpoints: new Map(),
    blockSize: BLOCK,
    hashAlgo: 'sha256_cbor',
  });
  for (const b of backends) feed.attach(b);
  const policy = new KvAwarePolicy({ feed, hasher, metrics: new ProxyMetrics() });
  return { feed, policy };
}

/** What a late router without snapshots could know: every batch the replay buffer still holds. */
async function replayOnly(replayEndpoint: string): Promise<KvBlockIndex> {
  const index = new KvBlockIndex();
  const dealer = new zmq.Dealer({ linger: 0, receiveTimeout: 5000 });
  dealer.connect(replayEndpoint);
  try {
    await dealer.send(['', seqBytes(0n)]);
    while (true) {
      const [, seq, payload] = await dealer.receive();
      if (seq!.equals(END_SEQ)) break;
      index.apply('b', decodeBatch(payload!));
    }
  } finally {
    dealer.close();
  }
  return index;
}

test('a router started after 10 000 requests rebuilds its index from the snapshots and routes as one that watched', async () => {
  // --mode echo: the model is not run (tokens come from the prompt), the KV cache and its events are the engine's.
  const engines = await Promise.all(
    ['a', 'b'].map(() => {
      const config = buildEngineConfig({
        model: 'tiny',
        num_gpu_blocks: 512,
        max_model_len: 64,
        max_num_seqs: BATCH,
        kv_events_config: {
          enable_kv_cache_events: true,
          endpoint: 'tcp://127.0.0.1:*',
          replay_endpoint: 'tcp://127.0.0.1:*',
          buffer_steps: 20,
        },
      });
      config.emulation = buildEmulationConfig({ mode: 'echo' }, config.model.seed);
      return Engine.create(config);
    }),
  );
  const backends = engines.map((engine, i) => {
    const b = new Backend(`http://engine-${i}.test:8000`, 'decode', 'cli', true);
    b.info = { connector: null, kv_events: engine.kvEventsInfo() };
    return b;
  });
  const publishers = engines.map((e) => e.kvEvents.publisher as ZmqEventPublisher);
  const hasher = new PromptBlockHasher(loadTokenizer('tiny'));
  const watcher = router(backends, hasher);
  let late: ReturnType<typeof router> | null = null;
  const caughtUp = (r: ReturnType<typeof router>) =>
    backends.every(
      (b, i) => BigInt(r.feed.subscriberStats(b.url)?.lastSeq ?? -1) === publishers[i]!.nextSeq - 1n,
    );
  try {
    // The watcher is connected before the first request: its first snapshot is of empty caches.
    await until(
      () => backends.every((b) => (watcher.feed.subscriberStats(b.url)?.snapshots ?? 0) >= 1),
      'the watcher',
    );
    const sampling = samplingParams({ maxTokens: 1 });
    let served = 0;
    for (let n = 0; n < REQUESTS; ) {
      for (let i = 0; i < BATCH; i++, n++) {
        const k = n % PREFIXES;
        engines[k % 2]!.addRequest({ requestId: `r${n}`, promptTokenIds: prompt(k, n), sampling });
      }
      for (const engine of engines) {
        while (engine.hasWork()) served += (await engine.step()).deltas.filter((d) => d.finished).length;
      }
    }
    assert.equal(served, REQUESTS);
    await until(() => caughtUp(watcher), 'the watcher heard every batch');
    for (const [i, p] of publishers.entries()) {
      assert.ok(p.nextSeq > 20n * 4n, `engine ${i}'s replay buffer rolled over (${p.nextSeq} batches)`);
      assert.ok(p.stats().trackedBlocks > 0);
    }

    late = router(backends, hasher);
    await until(() => caughtUp(late!), 'the late router caught up');
    for (const [i, b] of backends.entries()) {
      assert.ok((late.feed.subscriberStats(b.url)?.snapshots ?? 0) >= 1, 'rebuilt from a snapshot');
      const watched = watcher.feed.index.held(b.url);
      assert.ok(
        watched.size > 2 * (PREFIXES / 2),
        `engine ${i} holds its prefixes and more (${watched.size})`,
      );
      assert.deepEqual(sorted(late.feed.index.held(b.url)), sorted(watched), `engine ${i}: the same index`);
      // The control: the replay buffer alone does not rebuild it.
      const replayed = await replayOnly(engines[i]!.kvEventsInfo()!.replay_endpoint!);
      assert.notDeepEqual(sorted(replayed.held('b')), sorted(watched), 'replay alone falls short');
    }

    // Every prompt is scored and routed alike: cached tokens per engine, and the choice.
    let matched = 0;
    for (let k = 0; k < PREFIXES; k++) {
      const body = { prompt: prompt(k, REQUESTS + k) };
      const fromStart = watcher.policy.matchedTokens(backends, body);
      assert.deepEqual(late.policy.matchedTokens(backends, body), fromStart, `prefix ${k}`);
      const chosen: string[] = [watcher, late].map(
        (r) => r.policy.select('decode', backends, { body } as never).url,
      );
      assert.equal(chosen[1], chosen[0], `prefix ${k} goes to the same engine`);
      if (fromStart[k % 2]! >= 2 * BLOCK) {
        matched++;
        assert.equal(chosen[0], backends[k % 2]!.url, `prefix ${k} goes where it is cached`);
      }
    }
    assert.ok(matched > PREFIXES / 2, `most prefixes are cached where they were served (${matched})`);
  } finally {
    await watcher.feed.close();
    await late?.feed.close();
    await Promise.all(engines.map((e) => e.shutdown()));
  }
});

/** `kvconnect serve` in its own process, KV events on ipc endpoints under `dir`. */
function serve(dir: string, port = 0): ReturnType<typeof serveProcess> {
  const events = {
    enable_kv_cache_events: true,
    endpoint: `ipc://${join(dir, 'pub')}`,
    replay_endpoint: `ipc://${join(dir, 'replay')}`,
    buffer_steps: 5,
  };
  return serveProcess(
    tinyServeArgs({
      port,
      numGpuBlocks: 256,
      maxModelLen: 128,
      flags: ['--mode', 'echo', '--kv-events-config', JSON.stringify(events)],
    }),
  );
}

async function complete(url: string, prompt: number[]): Promise<void> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', prompt, max_tokens: 1, temperature: 0 }),
  });
  assert.equal(res.status, 200, await res.text());
}

async function stop(proc: ServeProcess): Promise<void> {
  if (proc.exitCode !== null) return;
  const exited = new Promise((r) => proc.once('exit', r));
  proc.kill('SIGKILL');
  await exited;
}

test('across processes: a proxy started late rebuilds from the snapshot; a restarted server (new epoch) is resynchronised', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvc-late-router-'));
  let server = await serve(dir);
  const watched = new KvBlockIndex();
  const watcher = KVEventSubscriber.start({
    endpoint: `ipc://${join(dir, 'pub')}`,
    replayEndpoint: `ipc://${join(dir, 'replay')}`,
    onBatch: (b) => watched.apply('s', b),
    onReset: () => watched.clear('s'),
  });
  let proxy: Awaited<ReturnType<typeof startProxy>> | null = null;
  try {
    await watcher.resync();
    for (let n = 0; n < 40; n++) await complete(server.url, prompt(n % 8, n));
    await until(() => watcher.stats().received >= 40, 'the watcher heard the requests');
    proxy = await startProxy(
      resolveProxyOptions({
        prefill: [],
        decode: [server.url],
        port: 0,
        policy: 'kv_aware',
        tokenizer: 'tiny',
        healthIntervalMs: 60_000,
      }),
    );
    const feed = proxy.kvEvents!;
    const url = new URL(server.url).href.replace(/\/$/, '');
    await until(() => (feed.subscriberStats(url)?.snapshots ?? 0) >= 1, 'the proxy applied a snapshot');
    await until(() => feed.subscriberStats(url)!.lastSeq === watcher.stats().lastSeq, 'the proxy caught up');
    assert.ok(watched.size('s') > 8 * 2, `the server holds the prefixes (${watched.size('s')})`);
    assert.deepEqual(
      sorted(feed.index.held(url)),
      sorted(watched.held('s')),
      'the same index as the watcher',
    );
    const epoch = feed.subscriberStats(url)!.epoch;
    assert.ok(epoch);

    // The server restarts on the same port and endpoints: an empty cache, a new epoch.
    const port = Number(new URL(server.url).port);
    await stop(server.proc);
    server = await serve(dir, port);
    await complete(server.url, prompt(100, 1));
    await until(() => feed.subscriberStats(url)!.epochChanges === 1, 'the new epoch');
    await until(() => feed.index.size(url) === 3, "the new server's one prompt");
    assert.notEqual(feed.subscriberStats(url)!.epoch, epoch);
    const hashes = hasherFor().hashes({ prompt: prompt(100, 1) }, BLOCK, 'sha256_cbor');
    assert.deepEqual(
      sorted(feed.index.held(url)),
      sorted(new Map(hashes.map((h) => [h, 1]))),
      'nothing of the old server is kept',
    );
  } finally {
    await watcher.close();
    await proxy?.close();
    await stop(server.proc);
    rmSync(dir, { recursive: true, force: true });
  }
});

function hasherFor(): PromptBlockHasher {
  return new PromptBlockHasher(loadTokenizer('tiny'));
}
