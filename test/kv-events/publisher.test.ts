import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import * as zmq from 'zeromq';
import { parseKVEventsConfig } from '../../src/config/kv-events-config.ts';
import { Engine } from '../../src/engine/engine.ts';
import { samplingParams } from '../../src/engine/sampling-params.ts';
import { externalBlockHash } from '../../src/kv/block-hash.ts';
import { BlockHasher } from '../../src/kv/block-hasher.ts';
import { END_SEQ, seqBytes } from '../../src/kv-events/endpoint.ts';
import { ZmqEventPublisher } from '../../src/kv-events/publisher.ts';
import { KVEventSubscriber, publisherRestarted } from '../../src/kv-events/subscriber.ts';
import type { BlockStoredEvent, KVEventBatch, WireKVEvent } from '../../src/kv-events/wire.ts';

const LOOPBACK = { endpoint: 'tcp://127.0.0.1:*', replay_endpoint: 'tcp://127.0.0.1:*' };

async function until(cond: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const start = Date.now();
  while (!cond()) {
    if (Date.now() - start > timeoutMs) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function run(engine: Engine, id: string, prompt: number[], maxTokens = 1): Promise<void> {
  engine.addRequest({
    requestId: id,
    promptTokenIds: prompt,
    sampling: samplingParams({ maxTokens, ignoreEos: true }),
  });
  while (engine.hasWork()) await engine.step();
}

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

test('the engine publishes BlockStored / BlockRemoved / AllBlocksCleared with the hashes src/kv computes', async () => {
  const engine = await Engine.create({
    model: 'tiny',
    num_gpu_blocks: 8,
    max_model_len: 112,
    kv_events_config: { enable_kv_cache_events: true, topic: 'kv@engine', ...LOOPBACK },
  });
  const info = engine.kvEventsInfo();
  assert.ok(info);
  assert.equal(info.block_size, 16);
  const hasher = new BlockHasher(16);
  const a = range(1, 40);
  await run(engine, 'a', a);
  const events: WireKVEvent[] = [];
  const seqs: bigint[] = [];
  const sub = KVEventSubscriber.start({
    endpoint: info.endpoint,
    replayEndpoint: info.replay_endpoint,
    topic: 'kv@engine',
    onBatch: (b, seq) => {
      assert.equal(b.dataParallelRank, 0);
      seqs.push(seq);
      events.push(...b.events);
    },
  });
  try {
    // This subscriber joined after the first batch: it catches up through the replay socket.
    await sub.replayFrom(0n);
    const hashesA = hasher.hashTokens(a).map(externalBlockHash);
    assert.equal(events.length, 1);
    const first = events[0] as BlockStoredEvent;
    assert.deepEqual(first, {
      type: 'BlockStored',
      blockHashes: hashesA,
      parentBlockHash: null,
      tokenIds: range(1, 32),
      blockSize: 16,
      loraId: null,
      medium: 'GPU',
      loraName: null,
      extraKeys: [null, null],
      groupIdx: 0,
      kvCacheSpecKind: 'full_attention',
    });
    assert.equal(first.blockHashes[0], 8866452693264111234n, "block 0's test vector (docs/kv-cache.md)");

    // Extending the prompt stores the third block with the second as parent.
    const b = range(1, 56);
    await run(engine, 'b', b);
    await until(() => events.length >= 2, 'the extension');
    const second = events[1] as BlockStoredEvent;
    assert.equal(second.parentBlockHash, hashesA[1]);
    assert.deepEqual(second.blockHashes, [hasher.hashTokens(b).map(externalBlockHash)[2]]);

    // 7 usable blocks: an unrelated 7-block request evicts every cached block.
    await run(engine, 'c', range(100, 100));
    await until(() => events.some((e) => e.type === 'BlockRemoved'), 'a BlockRemoved');
    const removed = events.filter((e) => e.type === 'BlockRemoved').flatMap((e) => e.blockHashes);
    assert.ok(removed.every((h) => hasher.hashTokens(b).map(externalBlockHash).includes(h)));

    assert.ok(engine.scheduler.resetPrefixCache());
    await run(engine, 'd', range(200, 3));
    await until(() => events.some((e) => e.type === 'AllBlocksCleared'), 'AllBlocksCleared');
    assert.deepEqual(
      seqs.map(Number),
      seqs.map((_, i) => i),
      'every batch once, in order',
    );
  } finally {
    await sub.close();
    await engine.shutdown();
  }
});

test('the replay ROUTER answers from a bounded buffer, then the end marker; a bad request is skipped', async () => {
  const pub = await ZmqEventPublisher.start(
    parseKVEventsConfig({ enable_kv_cache_events: true, buffer_steps: 3, ...LOOPBACK }),
  );
  const dealer = new zmq.Dealer({ linger: 0, receiveTimeout: 5000 });
  try {
    for (let i = 0; i < 5; i++)
      pub.publish({ ts: 1000 + i, events: [{ type: 'AllBlocksCleared' }], dataParallelRank: null });
    await until(() => pub.stats().published === 5, 'five batches sent');
    assert.equal(pub.stats().buffered, 3);
    dealer.connect(pub.replayEndpoint!);
    await dealer.send(['', 'not', 'a request']);
    const replayed: number[] = [];
    await dealer.send(['', seqBytes(1n)]);
    while (true) {
      const [empty, seq, payload] = await dealer.receive();
      assert.equal(empty!.length, 0);
      if (seq!.equals(END_SEQ)) {
        assert.equal(payload!.length, 0);
        break;
      }
      replayed.push(Number(seq!.readBigUInt64BE()));
    }
    assert.deepEqual(replayed, [2, 3, 4], 'seq 0 and 1 fell out of the 3-step buffer');
  } finally {
    dealer.close();
    await pub.shutdown();
  }
});

test('publish never blocks: past max_queue_size batches are dropped and counted', async () => {
  const pub = await ZmqEventPublisher.start(
    parseKVEventsConfig({ enable_kv_cache_events: true, max_queue_size: 1, ...LOOPBACK }),
  );
  try {
    for (let i = 0; i < 5; i++) pub.publish({ ts: i, events: [], dataParallelRank: null });
    assert.equal(pub.stats().dropped, 3);
    await until(() => pub.stats().published === 2, 'the kept batches sent');
  } finally {
    await pub.shutdown();
  }
  assert.throws(() => pub.publish({ ts: 0, events: [], dataParallelRank: null }), /Publisher is closed/);
});

/**
 * A TCP front for a unix-socket (ipc://) publisher that lets a subscriber in only while
 * `open`: with it shut, the subscriber's reconnects are cut at once, so what a publisher sends
 * meanwhile reaches no subscriber (a PUB socket drops it).
 */
async function gatedFront(
  path: string,
): Promise<{ endpoint: string; open: boolean; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const front = {
    endpoint: '',
    open: true,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server = createServer((down) => {
    if (!front.open) {
      down.destroy();
      return;
    }
    const up = connect({ path });
    for (const [a, b] of [
      [down, up],
      [up, down],
    ] as const) {
      sockets.add(a);
      a.pipe(b);
      a.on('error', () => b.destroy());
      a.on('close', () => {
        sockets.delete(a);
        b.destroy();
      });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  front.endpoint = `tcp://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return front;
}

/**
 * A subscriber hears 3 batches from one publisher, which stops; a new one starts on the same
 * endpoint, first (with `unheard` > 0) publishing that many batches past the old sequence
 * while the subscriber cannot reconnect, then publishes until the subscriber reports the reset.
 */
async function restartSeenBy(unheard: number): Promise<{ resets: number; after: number[] }> {
  const dir = mkdtempSync(join(tmpdir(), 'kvc-events-'));
  const path = join(dir, 'pub.sock');
  const config = parseKVEventsConfig({ enable_kv_cache_events: true, endpoint: `ipc://${path}` });
  const seen: number[] = [];
  let resets = 0;
  let pub = await ZmqEventPublisher.start(config);
  const front = await gatedFront(path);
  const sub = KVEventSubscriber.start({
    endpoint: front.endpoint,
    onBatch: (b: KVEventBatch) => seen.push(b.ts),
    onReset: () => resets++,
  });
  try {
    for (let round = 0; seen.length < 3; round++) {
      pub.publish({ ts: round, events: [], dataParallelRank: null });
      await new Promise((r) => setTimeout(r, 20));
    }
    const oldLast = Number(sub.lastSeq);
    if (unheard > 0) front.open = false;
    await pub.shutdown();
    const before = seen.length;
    pub = await ZmqEventPublisher.start(config);
    if (unheard > 0) {
      for (let i = 0; i < oldLast + unheard; i++) pub.publish({ ts: 50, events: [], dataParallelRank: null });
      await until(() => pub.stats().published === oldLast + unheard, 'the unheard batches sent');
      front.open = true;
    }
    for (let round = 0; resets === 0; round++) {
      if (round > 500) assert.fail('the restart was never noticed');
      pub.publish({ ts: 100 + round, events: [], dataParallelRank: null });
      await new Promise((r) => setTimeout(r, 20));
    }
    return { resets, after: seen.slice(before) };
  } finally {
    await sub.close();
    await pub.shutdown();
    await front.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

test('a subscriber survives a publisher restart: sequence reset -> onReset, then the new batches', async () => {
  const { resets, after } = await restartSeenBy(0);
  assert.equal(resets, 1);
  assert.ok(
    after.every((ts) => ts >= 100),
    'nothing from the old publisher after the reset',
  );
});

test('a restart is noticed when the subscriber reconnects after the new sequence passed the old one', async () => {
  const { resets, after } = await restartSeenBy(6);
  assert.equal(resets, 1);
  assert.ok(after.length > 0, "the new publisher's batches are delivered after the reset");
});

test('a restart: the sequence goes back, or any batch is the first since the connection dropped', () => {
  // Heard 0..5 live (so dupFloor is 4: only 5 may arrive again), connection up: 6 goes on, 3 is a restart.
  assert.equal(publisherRestarted(6n, 4n, false), false);
  assert.equal(publisherRestarted(9n, 4n, false), false, 'a gap: replayed, not a restart');
  assert.equal(publisherRestarted(3n, 4n, false), true);
  // After a disconnect, even the batch that continues the old sequence exactly is a new publisher's.
  assert.equal(publisherRestarted(6n, 4n, true), true);
  assert.equal(publisherRestarted(12n, 4n, true), true);
  assert.equal(publisherRestarted(0n, -1n, false), false, 'the first batch ever');
});

test("the OffloadingConnector's CPU tier events reach the wire with their medium", async () => {
  const engine = await Engine.create({
    model: 'tiny',
    num_gpu_blocks: 32,
    max_model_len: 128,
    kv_transfer_config: {
      kv_connector: 'OffloadingConnector',
      kv_role: 'kv_both',
      kv_connector_extra_config: { cpu_bytes_to_use: 8 * 2 ** 20 },
    },
    kv_events_config: { enable_kv_cache_events: true, ...LOOPBACK },
  });
  const info = engine.kvEventsInfo()!;
  const events: WireKVEvent[] = [];
  const sub = KVEventSubscriber.start({
    endpoint: info.endpoint,
    replayEndpoint: info.replay_endpoint,
    onBatch: (b) => events.push(...b.events),
  });
  try {
    const prompt = range(1, 40);
    await run(engine, 'a', prompt, 2);
    await sub.replayFrom(0n);
    await until(
      () => events.some((e) => e.type === 'BlockStored' && e.medium === 'CPU'),
      'a CPU-tier BlockStored',
    );
    const gpu = events.find((e) => e.type === 'BlockStored' && e.medium === 'GPU') as BlockStoredEvent;
    const cpu = events.find((e) => e.type === 'BlockStored' && e.medium === 'CPU') as BlockStoredEvent;
    assert.deepEqual(
      cpu.blockHashes,
      gpu.blockHashes.slice(0, cpu.blockHashes.length),
      'the same blocks, offloaded',
    );
  } finally {
    await sub.close();
    await engine.shutdown();
  }
});
