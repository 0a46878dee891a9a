/**
 * Snapshots, heartbeats and epochs over real ZeroMQ sockets: a subscriber that joins after
 * the replay buffer has rolled over rebuilds from the snapshot and then follows live, equal
 * to one that watched from the start; a gap the buffer cannot fill (batches dropped at the
 * publisher) is repaired from a snapshot; an idle publisher's heartbeats are heard and their
 * silence noticed; a restarted publisher (new epoch) is resynchronised; a publisher that
 * serves no snapshot (vLLM's replay socket) is followed by replay as before.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import * as zmq from 'zeromq';
import { parseKVEventsConfig } from '../../src/config/kv-events-config.ts';
import type { KVError } from '../../src/errors/kv-error.ts';
import { END_SEQ, SNAPSHOT_REQUEST, seqBytes } from '../../src/kv-events/endpoint.ts';
import { heartbeatSecondsFromEnv, ZmqEventPublisher } from '../../src/kv-events/publisher.ts';
import { KVEventSubscriber } from '../../src/kv-events/subscriber.ts';
import { decodeBatch, encodeBatch, type WireKVEvent } from '../../src/kv-events/wire.ts';
import { KvBlockIndex } from '../../src/proxy/kv-index.ts';
import { eventStream, stored } from './helpers/event-stream.ts';

const LOOPBACK = { endpoint: 'tcp://127.0.0.1:*', replay_endpoint: 'tcp://127.0.0.1:*' };

/** A publisher on loopback tcp with a replay socket; `heartbeatSeconds` 0 = none. */
function loopbackPublisher(
  fields: Record<string, unknown>,
  heartbeatSeconds: number,
): Promise<ZmqEventPublisher> {
  const config = parseKVEventsConfig({ enable_kv_cache_events: true, ...fields, ...LOOPBACK });
  return ZmqEventPublisher.start(config, 0, 'map', { heartbeatSeconds });
}

async function until(cond: () => boolean, what: string, timeoutMs = 30_000): Promise<void> {
  const start = Date.now();
  while (!cond()) {
    if (Date.now() - start > timeoutMs) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A subscriber feeding an index, as the proxy's feed does. */
function router(pub: { endpoint: string; replayEndpoint: string | null }, heartbeatTimeoutMs?: number) {
  const index = new KvBlockIndex();
  let resets = 0;
  const sub = KVEventSubscriber.start({
    endpoint: pub.endpoint,
    replayEndpoint: pub.replayEndpoint,
    onBatch: (b) => index.apply('b', b),
    onReset: () => {
      resets++;
      index.clear('b');
    },
    ...(heartbeatTimeoutMs === undefined ? {} : { heartbeatTimeoutMs }),
  });
  return { index, sub, resets: () => resets };
}

const sorted = (m: ReadonlyMap<bigint, number>) => [...m].sort((a, b) => (a[0] < b[0] ? -1 : 1));

/** Publishes `batches`, awaiting the sends now and then so the sockets keep up. */
async function publishAll(pub: ZmqEventPublisher, batches: WireKVEvent[][], watched?: KvBlockIndex) {
  for (const [i, events] of batches.entries()) {
    pub.publish({ ts: i, events, dataParallelRank: null });
    watched?.apply('b', { ts: i, events, dataParallelRank: 0 });
    if (i % 200 === 199) await until(() => pub.stats().queued === 0, 'the queue drained');
  }
  await until(() => pub.stats().queued === 0, 'the queue drained');
}

test('a subscriber that joins after the replay buffer rolled over rebuilds from the snapshot, then follows live', async () => {
  const pub = await loopbackPublisher({ buffer_steps: 20 }, 0);
  const truth = new KvBlockIndex();
  const [before, after] = [eventStream(7, 4000, 0), eventStream(8, 400)];
  let late: ReturnType<typeof router> | null = null;
  try {
    await publishAll(pub, before, truth);
    assert.ok(
      pub.stats().trackedBlocks > 1024,
      `a snapshot of several batches (${pub.stats().trackedBlocks})`,
    );
    late = router(pub);
    assert.ok(await late.sub.resync(), 'a snapshot was applied');
    assert.deepEqual(sorted(late.index.held('b')), sorted(truth.held('b')), 'the snapshot is the state');
    assert.equal(late.sub.stats().snapshots, 1);
    assert.equal(pub.stats().snapshots, 1);
    // Live from the resume point on: nothing missing, nothing twice.
    await publishAll(pub, after, truth);
    await until(() => late!.sub.lastSeq === BigInt(before.length + after.length - 1), 'the live batches');
    assert.deepEqual(sorted(late.index.held('b')), sorted(truth.held('b')), 'snapshot + live = every event');
  } finally {
    await late?.sub.close();
    await pub.shutdown();
  }
});

test('a snapshot taken while batches are published splices with the live stream without gaps or duplicates', async () => {
  const pub = await loopbackPublisher({ buffer_steps: 10_000 }, 0);
  const truth = new KvBlockIndex();
  const batches = eventStream(11, 3000);
  const late = router(pub);
  try {
    await publishAll(pub, batches.slice(0, 1500), truth);
    // The snapshot request and the rest of the stream race each other.
    const publishing = publishAll(pub, batches.slice(1500), truth);
    const snapshot = late.sub.resync();
    await Promise.all([publishing, snapshot]);
    assert.ok(await snapshot);
    await until(() => late.sub.lastSeq === BigInt(batches.length - 1), 'the last batch');
    assert.deepEqual(sorted(late.index.held('b')), sorted(truth.held('b')));
  } finally {
    await late.sub.close();
    await pub.shutdown();
  }
});

test('a gap the replay buffer cannot fill (batches dropped at the publisher) is repaired from a snapshot', async () => {
  const pub = await loopbackPublisher({ max_queue_size: 1 }, 0);
  const r = router(pub);
  try {
    await r.sub.resync();
    // The subscriber is connected once it hears a batch.
    for (let i = 0; r.sub.lastSeq < 0n; i++) {
      pub.publish({ ts: i, events: [], dataParallelRank: null });
      await new Promise((res) => setTimeout(res, 20));
    }
    const truth = new KvBlockIndex();
    // Five batches at once: the queue holds one, so three are dropped (their numbers taken).
    const events = [1n, 2n, 3n, 4n, 5n].map((h) => [stored([h], null, 'GPU')]);
    for (const e of events) {
      pub.publish({ ts: 1, events: e, dataParallelRank: null });
      truth.apply('b', { ts: 1, events: e, dataParallelRank: 0 });
    }
    assert.equal(pub.stats().dropped, 3);
    // The gap shows with the next batch; the replay buffer never had the dropped ones.
    await until(() => pub.stats().queued === 0, 'the kept batches sent');
    pub.publish({ ts: 2, events: [], dataParallelRank: null });
    await until(() => r.sub.stats().snapshots >= 2, 'the resync after the gap');
    assert.deepEqual(sorted(r.index.held('b')), sorted(truth.held('b')), 'the dropped stores are known');
  } finally {
    await r.sub.close();
    await pub.shutdown();
  }
});

test('an idle publisher sends heartbeats (empty batches); their silence makes the subscriber forget', async () => {
  const pub = await loopbackPublisher({}, 0.05);
  const r = router(pub, 400);
  let stopped = false;
  try {
    await r.sub.resync();
    pub.publish({ ts: 1, events: [stored([7n], null, 'GPU')], dataParallelRank: null });
    await until(() => r.sub.stats().heartbeats >= 3, 'three heartbeats');
    assert.ok(pub.stats().heartbeats >= 3);
    assert.equal(r.index.held('b').get(7n), 1, 'heartbeats change nothing');
    const resets = r.resets();
    await pub.shutdown();
    stopped = true;
    await until(() => r.resets() > resets, 'the silence noticed');
    assert.equal(r.index.held('b').size, 0, "a silent publisher's blocks are forgotten");
  } finally {
    await r.sub.close();
    if (!stopped) await pub.shutdown();
  }
});

test('a publisher restarted on the same endpoints has a new epoch: the subscriber resynchronises', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvc-epoch-'));
  // ipc endpoints are always bound, so the restarted publisher takes the same addresses.
  const config = parseKVEventsConfig({
    enable_kv_cache_events: true,
    endpoint: `ipc://${join(dir, 'pub')}`,
    replay_endpoint: `ipc://${join(dir, 'replay')}`,
  });
  const first = await ZmqEventPublisher.start(config, 0, 'map', { heartbeatSeconds: 0.05 });
  const r = router(first);
  let second: ZmqEventPublisher | null = null;
  try {
    await r.sub.resync();
    first.publish({ ts: 1, events: [stored([1n, 2n, 3n], null, 'GPU')], dataParallelRank: null });
    await until(() => r.index.held('b').size === 3, 'the first stores');
    assert.equal(r.sub.stats().epoch, first.epoch.toString('hex'));
    await first.shutdown();
    second = await ZmqEventPublisher.start(config, 0, 'map', { heartbeatSeconds: 0.05 });
    assert.notDeepEqual(second.epoch, first.epoch);
    second.publish({ ts: 2, events: [stored([9n], null, 'GPU')], dataParallelRank: null });
    await until(() => r.sub.stats().epochChanges === 1, 'the epoch change');
    await until(() => r.index.held('b').size === 1, "the new publisher's state");
    assert.deepEqual(sorted(r.index.held('b')), [[9n, 1]], 'nothing of the old publisher is kept');
    assert.equal(r.sub.stats().epoch, second.epoch.toString('hex'));
  } finally {
    await r.sub.close();
    await second?.shutdown();
    await first.shutdown();
    rmSync(dir, { recursive: true, force: true });
  }
});

/** vLLM's replay socket as its source serves it: numeric start only, the 3-frame end marker. */
async function vllmReplayDouble(buffer: [bigint, Uint8Array][]) {
  const router = new zmq.Router({ linger: 0 });
  await router.bind('tcp://127.0.0.1:*');
  const serving = (async () => {
    try {
      for await (const [client, , start] of router) {
        const from = BigInt.asUintN(64, start!.readBigUInt64BE());
        for (const [seq, payload] of buffer)
          if (seq >= from) await router.send([client!, '', seqBytes(seq), payload]);
        await router.send([client!, '', END_SEQ, '']);
      }
    } catch {
      // closed
    }
  })();
  return {
    endpoint: router.lastEndpoint!,
    close: () => {
      router.close();
      return serving;
    },
  };
}

test('a publisher without snapshots (vLLM) is followed by replay from 0', async () => {
  const payload = encodeBatch({ ts: 1, events: [stored([5n], null, 'GPU')], dataParallelRank: 0 });
  const replay = await vllmReplayDouble([[0n, payload]]);
  const pub = new zmq.Publisher({ linger: 0 });
  await pub.bind('tcp://127.0.0.1:*');
  const r = router({ endpoint: pub.lastEndpoint!, replayEndpoint: replay.endpoint });
  try {
    assert.equal(await r.sub.resync(), false, 'no snapshot');
    assert.deepEqual(sorted(r.index.held('b')), [[5n, 1]], 'caught up by replay');
    assert.equal(r.sub.stats().snapshots, 0);
    // The snapshot request itself reads, to vLLM, as a replay from far ahead: nothing but the end.
    const dealer = new zmq.Dealer({ linger: 0, receiveTimeout: 5000 });
    dealer.connect(replay.endpoint);
    await dealer.send(['', SNAPSHOT_REQUEST]);
    const [, seq] = await dealer.receive();
    assert.ok(seq!.equals(END_SEQ));
    dealer.close();
  } finally {
    await r.sub.close();
    pub.close();
    await replay.close();
  }
});

test('the snapshot reply: ordinary batches with topic and resume sequence, then the end marker with the epoch', async () => {
  const pub = await loopbackPublisher({ topic: 'kv@x' }, 0);
  const dealer = new zmq.Dealer({ linger: 0, receiveTimeout: 5000 });
  try {
    pub.publish({ ts: 1, events: [stored([1n, 2n], null, 'GPU')], dataParallelRank: null });
    pub.publish({
      ts: 2,
      events: [stored([3n], 2n, 'GPU'), stored([1n], null, 'CPU')],
      dataParallelRank: null,
    });
    dealer.connect(pub.replayEndpoint!);
    await dealer.send(['', SNAPSHOT_REQUEST]);
    const frames: Buffer[][] = [];
    while (true) {
      const f = (await dealer.receive()) as Buffer[];
      frames.push(f);
      if (f[2]!.equals(END_SEQ)) break;
    }
    const end = frames.pop()!;
    assert.deepEqual(end.slice(0, 3), [Buffer.alloc(0), Buffer.alloc(0), END_SEQ]);
    assert.ok(end[3]!.equals(pub.epoch), 'the epoch closes the reply');
    assert.equal(frames.length, 2, 'AllBlocksCleared, then the stores');
    for (const [empty, topic, resume] of frames) {
      assert.equal(empty!.length, 0);
      assert.equal(topic!.toString(), 'kv@x');
      assert.equal(resume!.readBigUInt64BE(), 2n, 'two batches published: live resumes at 2');
    }
    assert.deepEqual(decodeBatch(frames[0]![3]!).events, [{ type: 'AllBlocksCleared' }]);
    const stores = decodeBatch(frames[1]![3]!).events;
    assert.deepEqual(
      stores.map((e) => (e.type === 'BlockStored' ? [e.medium, e.parentBlockHash, e.blockHashes] : e.type)),
      [
        ['GPU', null, [1n, 2n, 3n]],
        ['CPU', null, [1n]],
      ],
      'one chain per tier, parent first',
    );
  } finally {
    dealer.close();
    await pub.shutdown();
  }
});

test('KVCONNECT_KV_EVENTS_HEARTBEAT_S: seconds, default 1, 0 for none; anything else names the variable and the fix', () => {
  assert.equal(heartbeatSecondsFromEnv({}), 1);
  assert.equal(heartbeatSecondsFromEnv({ KVCONNECT_KV_EVENTS_HEARTBEAT_S: '0.25' }), 0.25);
  assert.equal(heartbeatSecondsFromEnv({ KVCONNECT_KV_EVENTS_HEARTBEAT_S: '0' }), 0);
  for (const bad of ['-1', 'soon', 'Infinity']) {
    assert.throws(
      () => heartbeatSecondsFromEnv({ KVCONNECT_KV_EVENTS_HEARTBEAT_S: bad }),
      (e: KVError) =>
        e.code === 'KV_CONFIG_INVALID' &&
        e.message ===
          `Invalid value for KVCONNECT_KV_EVENTS_HEARTBEAT_S: expected a number of seconds >= 0, received ${JSON.stringify(bad)}` &&
        /0 for none/.test(e.hint ?? ''),
    );
  }
});
