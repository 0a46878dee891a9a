/**
 * A subscriber written for vLLM (Python, pyzmq + msgpack, decoding as vLLM's example
 * subscriber does) reads kvconnect's KV events unchanged, in both layouts, including a
 * catch-up through the replay socket; heartbeats and snapshots, which it does not know, do
 * not disturb it, a snapshot's batches decode as ordinary batches, and a LoRA request's blocks
 * carry lora_id / lora_name.
 */
import assert from 'node:assert/strict';
import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import * as zmq from 'zeromq';
import { buildEmulationConfig } from '../../src/config/emulation-config.ts';
import { buildEngineConfig } from '../../src/config/engine-config.ts';
import { parseKVEventsConfig } from '../../src/config/kv-events-config.ts';
import { Engine } from '../../src/engine/engine.ts';
import type { LoRARequest } from '../../src/engine/lora/lora-request.ts';
import { samplingParams } from '../../src/engine/sampling-params.ts';
import { externalBlockHash } from '../../src/kv/block-hash.ts';
import { BlockHasher } from '../../src/kv/block-hasher.ts';
import { END_SEQ, SNAPSHOT_REQUEST } from '../../src/kv-events/endpoint.ts';
import { ZmqEventPublisher } from '../../src/kv-events/publisher.ts';
import type { BlockStoredEvent } from '../../src/kv-events/wire.ts';

const SCRIPT = fileURLToPath(new URL('./fixtures/vllm_kv_events_subscriber.py', import.meta.url));
const PYTHON = '/usr/bin/python3';

interface Decoded {
  type: string;
  layout: string;
  seq: number;
  dp_rank: number;
  block_hashes?: string[];
  parent_block_hash?: string | null;
  token_ids?: number[];
  [key: string]: unknown;
}

function startSubscriber(endpoint: string, replay: string, topic: string, maxEvents: number) {
  const child: ChildProcessWithoutNullStreams = spawn(PYTHON, [
    SCRIPT,
    endpoint,
    replay,
    topic,
    String(maxEvents),
    '60',
  ]);
  const lines: string[] = [];
  let buffer = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => {
    buffer += d.toString();
    const parts = buffer.split('\n');
    buffer = parts.pop() ?? '';
    lines.push(...parts);
  });
  child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  const ready = async () => {
    while (!lines.includes('ready')) {
      if (child.exitCode !== null) assert.fail(`subscriber exited early: ${stderr}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  const done = async (): Promise<Decoded[]> => {
    const code = await exited;
    assert.equal(code, 0, `subscriber failed:\n${stderr}`);
    assert.ok(lines.includes('done'), stderr);
    return lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Decoded);
  };
  return { ready, done, kill: () => child.kill('SIGKILL') };
}

async function run(engine: Engine, id: string, prompt: number[], lora?: LoRARequest): Promise<void> {
  engine.addRequest({
    requestId: id,
    promptTokenIds: prompt,
    sampling: samplingParams({ maxTokens: 1 }),
    ...(lora ? { loraRequest: lora } : {}),
  });
  while (engine.hasWork()) await engine.step();
}

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

for (const layout of ['map', 'array'] as const) {
  test(`a vLLM-style Python subscriber decodes kvconnect's events unchanged (${layout} layout)`, async () => {
    if (layout === 'array') process.env['KVCONNECT_KV_EVENTS_ARRAY_LIKE'] = '1';
    let engine: Engine;
    try {
      const config = buildEngineConfig({
        model: 'tiny',
        num_gpu_blocks: 16,
        max_model_len: 128,
        kv_events_config: {
          enable_kv_cache_events: true,
          endpoint: 'tcp://127.0.0.1:*',
          replay_endpoint: 'tcp://127.0.0.1:*',
          topic: 'kv-events',
        },
      });
      // Without weights (adapters are names), so the LoRA request below needs no adapter file.
      config.emulation = buildEmulationConfig({ mode: 'random' }, config.model.seed);
      engine = await Engine.create(config);
    } finally {
      delete process.env['KVCONNECT_KV_EVENTS_ARRAY_LIKE'];
    }
    const info = engine.kvEventsInfo()!;
    const hasher = new BlockHasher(16);
    const first = range(1, 33);
    const second = range(1, 50);
    // The first batch is published before the subscriber exists: it must come by replay.
    await run(engine, 'first', first);
    const sub = startSubscriber(info.endpoint, info.replay_endpoint!, 'kv-events', 4);
    try {
      await sub.ready();
      await new Promise((r) => setTimeout(r, 200));
      await run(engine, 'second', second);
      assert.ok(engine.scheduler.resetPrefixCache());
      await run(engine, 'third', range(200, 5));
      await run(engine, 'lora', first, { loraName: 'sql-lora', loraIntId: 3, loraPath: '/unused' });
      const got = await sub.done();
      const h = (tokens: number[]) => hasher.hashTokens(tokens).map((x) => externalBlockHash(x).toString());
      // Heartbeats (empty batches) may take sequence numbers between the events: they print nothing.
      assert.deepEqual(
        got.map((e) => [e.type, e.layout, e.dp_rank]),
        [
          ['BlockStored', layout, 0],
          ['BlockStored', layout, 0],
          ['AllBlocksCleared', layout, 0],
          ['BlockStored', layout, 0],
        ],
      );
      assert.equal(got[0]!.seq, 0);
      assert.ok(got[1]!.seq > got[0]!.seq && got[2]!.seq > got[1]!.seq, 'in sequence order');
      assert.deepEqual(got[0]!.block_hashes, h(first));
      assert.equal(got[0]!.parent_block_hash, null);
      assert.deepEqual(got[0]!.token_ids, range(1, 32));
      assert.equal(got[0]!['block_size'], 16);
      assert.equal(got[0]!['medium'], 'GPU');
      assert.equal(got[0]!['kv_cache_spec_kind'], 'full_attention');
      assert.deepEqual(got[1]!.block_hashes, h(second).slice(2));
      assert.equal(got[1]!.parent_block_hash, h(first)[1]);
      assert.deepEqual(got[1]!.token_ids, range(33, 16));
      assert.equal(got[0]!['lora_id'], null);
      assert.equal(got[0]!['lora_name'], null);
      // A LoRA request's blocks: the adapter's id and name, hashes keyed by its name.
      assert.equal(got[3]!['lora_id'], 3);
      assert.equal(got[3]!['lora_name'], 'sql-lora');
      const keyed = hasher.newHashes({ allTokenIds: first, blockHashes: [], loraName: 'sql-lora' });
      assert.deepEqual(
        got[3]!.block_hashes,
        keyed.map((x) => externalBlockHash(x).toString()),
      );
    } finally {
      sub.kill();
      await engine.shutdown();
    }
  });
}

function block(hash: bigint, parent: bigint | null): BlockStoredEvent {
  return {
    type: 'BlockStored',
    blockHashes: [hash],
    parentBlockHash: parent,
    tokenIds: range(Number(hash % 100n), 16),
    blockSize: 16,
    loraId: null,
    medium: 'GPU',
    loraName: null,
    extraKeys: [null],
    groupIdx: 0,
    kvCacheSpecKind: 'full_attention',
  };
}

for (const layout of ['map', 'array'] as const) {
  test(`heartbeats and snapshots leave a vLLM-style subscriber undisturbed; snapshot batches decode (${layout})`, async () => {
    const pub = await ZmqEventPublisher.start(
      parseKVEventsConfig({
        enable_kv_cache_events: true,
        endpoint: 'tcp://127.0.0.1:*',
        replay_endpoint: 'tcp://127.0.0.1:*',
        topic: 'kv-events',
      }),
      0,
      layout,
      { heartbeatSeconds: 0.02 },
    );
    const dealer = new zmq.Dealer({ linger: 0, receiveTimeout: 5000 });
    // Published before the subscriber exists: it comes by replay, past the heartbeats around it.
    pub.publish({ ts: 1, events: [block(1n, null)], dataParallelRank: null });
    const sub = startSubscriber(pub.endpoint, pub.replayEndpoint!, 'kv-events', 3);
    try {
      await sub.ready();
      await new Promise((r) => setTimeout(r, 300));
      // Another client asks for a snapshot on the same replay socket.
      dealer.connect(pub.replayEndpoint!);
      await dealer.send(['', SNAPSHOT_REQUEST]);
      const payloads: Buffer[] = [];
      while (true) {
        const [, , seq, payload] = (await dealer.receive()) as Buffer[];
        if (seq!.equals(END_SEQ)) break;
        payloads.push(payload!);
      }
      pub.publish({ ts: 2, events: [block(2n, 1n)], dataParallelRank: null });
      await new Promise((r) => setTimeout(r, 100));
      pub.publish({ ts: 3, events: [{ type: 'AllBlocksCleared' }], dataParallelRank: null });
      const got = await sub.done();
      assert.ok(pub.stats().heartbeats > 3, `heartbeats were sent (${pub.stats().heartbeats})`);
      assert.deepEqual(
        got.map((e) => [e.type, e.block_hashes ?? null]),
        [
          ['BlockStored', ['1']],
          ['BlockStored', ['2']],
          ['AllBlocksCleared', null],
        ],
      );
      assert.ok(got[1]!.seq - got[0]!.seq > 1, 'heartbeats took sequence numbers in between');
      // The snapshot's batches, through the fixture's strict decoder.
      const decoded = spawnSync(PYTHON, [SCRIPT, '--decode'], {
        input: `${payloads.map((p) => p.toString('hex')).join('\n')}\n`,
        encoding: 'utf8',
      });
      assert.equal(decoded.status, 0, decoded.stderr);
      const lines = decoded.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { events?: Decoded[]; error?: string });
      assert.deepEqual(
        lines.map((l) => l.error ?? l.events!.map((e) => [e.type, e.layout, e.block_hashes ?? null])),
        [[['AllBlocksCleared', layout, null]], [['BlockStored', layout, ['1']]]],
        'AllBlocksCleared, then the one resident block',
      );
    } finally {
      sub.kill();
      dealer.close();
      await pub.shutdown();
    }
  });
}
