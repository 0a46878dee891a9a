/**
 * A subscriber written for vLLM (Python, pyzmq + msgpack, decoding as vLLM's example
 * subscriber does) reads kvconnect's KV events unchanged, in both layouts, including a
 * catch-up through the replay socket.
 */
import assert from 'node:assert/strict';
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Engine } from '../../src/engine/engine.ts';
import { samplingParams } from '../../src/engine/sampling-params.ts';
import { externalBlockHash } from '../../src/kv/block-hash.ts';
import { BlockHasher } from '../../src/kv/block-hasher.ts';

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

async function run(engine: Engine, id: string, prompt: number[]): Promise<void> {
  engine.addRequest({ requestId: id, promptTokenIds: prompt, sampling: samplingParams({ maxTokens: 1 }) });
  while (engine.hasWork()) await engine.step();
}

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

for (const layout of ['map', 'array'] as const) {
  test(`a vLLM-style Python subscriber decodes kvconnect's events unchanged (${layout} layout)`, async () => {
    if (layout === 'array') process.env['KVCONNECT_KV_EVENTS_ARRAY_LIKE'] = '1';
    let engine: Engine;
    try {
      engine = await Engine.create({
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
    } finally {
      delete process.env['KVCONNECT_KV_EVENTS_ARRAY_LIKE'];
    }
    const info = engine.kvEventsInfo()!;
    const hasher = new BlockHasher(16);
    const first = range(1, 33);
    const second = range(1, 50);
    // The first batch is published before the subscriber exists: it must come by replay.
    await run(engine, 'first', first);
    const sub = startSubscriber(info.endpoint, info.replay_endpoint!, 'kv-events', 3);
    try {
      await sub.ready();
      await new Promise((r) => setTimeout(r, 200));
      await run(engine, 'second', second);
      assert.ok(engine.scheduler.resetPrefixCache());
      await run(engine, 'third', range(200, 5));
      const got = await sub.done();
      const h = (tokens: number[]) => hasher.hashTokens(tokens).map((x) => externalBlockHash(x).toString());
      assert.deepEqual(
        got.map((e) => [e.seq, e.type, e.layout, e.dp_rank]),
        [
          [0, 'BlockStored', layout, 0],
          [1, 'BlockStored', layout, 0],
          [2, 'AllBlocksCleared', layout, 0],
        ],
      );
      assert.deepEqual(got[0]!.block_hashes, h(first));
      assert.equal(got[0]!.parent_block_hash, null);
      assert.deepEqual(got[0]!.token_ids, range(1, 32));
      assert.equal(got[0]!['block_size'], 16);
      assert.equal(got[0]!['medium'], 'GPU');
      assert.equal(got[0]!['kv_cache_spec_kind'], 'full_attention');
      assert.deepEqual(got[1]!.block_hashes, h(second).slice(2));
      assert.equal(got[1]!.parent_block_hash, h(first)[1]);
      assert.deepEqual(got[1]!.token_ids, range(33, 16));
    } finally {
      sub.kill();
      await engine.shutdown();
    }
  });
}
