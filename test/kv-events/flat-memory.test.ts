/**
 * The engine hands every step's KV cache events to the publisher (or drops them) and keeps
 * nothing: the heap stays flat over 100k requests, whether events are off, on with the null
 * publisher, or published over ZeroMQ with a bounded replay buffer. A control run that keeps
 * every event shows the measurement would catch a leak.
 * The model is not run (the simulated executor): the event path is the engine's own.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import v8 from 'node:v8';
import vm from 'node:vm';
import type { KVEventsConfigFields } from '../../src/config/kv-events-config.ts';
import { Engine } from '../../src/engine/engine.ts';
import { samplingParams } from '../../src/engine/sampling-params.ts';
import type { KVCacheEvent } from '../../src/kv/interfaces.ts';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

const REQUESTS = 100_000;
const WARMUP = 20_000;
const BATCH = 256;
/** Allowed heap growth between the warm-up and the end (MB); the leak grows by ~60 MB. */
const FLAT_MB = 8;

function heapMb(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed / 2 ** 20;
}

async function growth(
  kvEvents: Partial<KVEventsConfigFields> | null,
  keep?: (events: readonly KVCacheEvent[]) => void,
): Promise<{ mb: number; published: number }> {
  const engine = await Engine.create(
    {
      model: 'tiny',
      num_gpu_blocks: 512,
      max_model_len: 64,
      max_num_seqs: BATCH,
      kv_events_config: kvEvents,
    },
    {},
  );
  if (keep) engine.kvEvents.drain = keep;
  const sampling = samplingParams({ maxTokens: 1 });
  let atWarmup = 0;
  try {
    for (let n = 0; n < REQUESTS; ) {
      for (let i = 0; i < BATCH; i++, n++) {
        // 17 tokens: one full block (BlockStored), distinct per request so blocks get evicted (BlockRemoved).
        const prompt = [
          n % 256,
          (n >> 8) % 256,
          (n >> 16) % 256,
          ...Array.from({ length: 14 }, (_, j) => j + 1),
        ];
        engine.addRequest({ requestId: `r${n}`, promptTokenIds: prompt, sampling });
      }
      while (engine.hasWork()) await engine.step();
      if (atWarmup === 0 && n >= WARMUP) atWarmup = heapMb();
    }
    return { mb: heapMb() - atWarmup, published: engine.kvEvents.publisher.stats().published };
  } finally {
    await engine.shutdown();
  }
}

test('heap stays flat over 100k requests: events off, on with the null publisher, on over ZeroMQ', async (t) => {
  const off = await growth(null);
  const dropped = await growth({ enable_kv_cache_events: true, publisher: 'null' });
  const zmq = await growth({
    enable_kv_cache_events: true,
    endpoint: 'tcp://127.0.0.1:*',
    replay_endpoint: 'tcp://127.0.0.1:*',
    buffer_steps: 500,
  });
  const report = `off ${off.mb.toFixed(1)} MB, null ${dropped.mb.toFixed(1)} MB, zmq ${zmq.mb.toFixed(1)} MB`;
  t.diagnostic(report);
  assert.ok(off.mb < FLAT_MB, report);
  assert.ok(dropped.mb < FLAT_MB, report);
  assert.ok(zmq.mb < FLAT_MB, report);
  assert.ok(zmq.published >= REQUESTS / BATCH, `one batch per step was published (${zmq.published})`);
});

test('control: an engine that keeps its events grows well past the bound', async (t) => {
  const kept: KVCacheEvent[] = [];
  const leak = await growth({ enable_kv_cache_events: true, publisher: 'null' }, (events) => {
    kept.push(...events);
  });
  t.diagnostic(`kept ${kept.length} events, grew ${leak.mb.toFixed(1)} MB`);
  assert.ok(
    kept.length >= 2 * (REQUESTS - WARMUP),
    `BlockStored and BlockRemoved per request (${kept.length})`,
  );
  assert.ok(leak.mb > 2 * FLAT_MB, `a kept-events engine grew ${leak.mb.toFixed(1)} MB`);
});
