/**
 * OffloadingConnector over Redis: the shared conformance suite with a single-server Redis
 * tier, Redis down (recompute within the bound, a warning, a metric), and a producer and a
 * consumer engine sharing a 3-node Redis Cluster. Every server is started by the test.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { buildEngineConfig } from '../../src/config/engine-config.ts';
import { resolveModelInfo } from '../../src/config/model-info.ts';
import { parseOffloadingConfig } from '../../src/connectors/offloading/config.ts';
import { OffloadLayout } from '../../src/connectors/offloading/layout.ts';
import type { RequestOutputDelta } from '../../src/engine/api.ts';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { samplingParams } from '../../src/engine/llm.ts';
import { BlockHashFunction } from '../../src/kv/block-hash.ts';
import { buildKVCacheConfig } from '../../src/kv/kv-cache-config.ts';
import { captureLogs } from '../../src/logging/logger.ts';
import { type ConformanceContext, type ConformanceModel, runConnectorConformance } from './conformance.ts';
import {
  freePort,
  type RedisClusterHandle,
  type RedisServer,
  redisCommand,
  startRedis,
  startRedisCluster,
} from './redis-helpers.ts';

const GREEDY = samplingParams({ maxTokens: 6, temperature: 0, ignoreEos: true });
const MiB = 1 << 20;

function offloadConfig(extra: Record<string, unknown>): Record<string, unknown> {
  return {
    kv_connector: 'OffloadingConnector',
    kv_role: 'kv_both',
    kv_connector_extra_config: { cpu_bytes_to_use: 16 * MiB, ...extra },
  };
}

/** The tier keys of one chunk of a prompt, computed the way the engine does. */
function chunkKeys(
  ctx: ConformanceContext,
  extra: Record<string, unknown>,
  prompt: number[],
  chunk: number,
): string[] {
  const engineConfig = buildEngineConfig({
    model: ctx.model,
    block_size: ctx.blockSize,
    num_gpu_blocks: 96,
    max_model_len: 256,
  });
  const kvCacheConfig = buildKVCacheConfig({
    hfConfig: resolveModelInfo(ctx.model).hfConfig,
    blockSize: ctx.blockSize,
    numBlocks: 96,
    hybridEnabled: ctx.hybridKvCacheManager,
    maxModelLen: 256,
  });
  const config = parseOffloadingConfig({ cpu_bytes_to_use: 16 * MiB, ...extra }, engineConfig);
  const layout = new OffloadLayout(engineConfig, kvCacheConfig, config);
  const hasher = new BlockHashFunction('sha256_cbor');
  const hashes = [];
  let parent = null;
  for (let b = 0; (b + 1) * ctx.blockSize <= prompt.length; b++) {
    parent = hasher.hashBlock(parent, prompt, b * ctx.blockSize, (b + 1) * ctx.blockSize);
    hashes.push(parent);
  }
  const keys = layout.chunkKeys(hashes, chunk);
  assert.ok(keys, 'the chunk is fully hashed');
  assert.equal(keys.length > 1, ctx.hybridKvCacheManager, 'one key per KV cache group');
  return keys;
}

// ---- redis tier (single server) ----
const redisExtra = (ctx: ConformanceContext) => ({
  spec_name: 'TieringOffloadingSpec',
  secondary_tiers: [
    { type: 'redis', url: ctx.state['url'], key_prefix: ctx.state['prefix'], timeout_ms: 2000 },
  ],
});
let conformanceRedis: RedisServer | null = null;
let prefixCounter = 0;

runConnectorConformance({
  name: 'OffloadingConnector (redis tier)',
  mode: 'storage',
  supportsHybrid: true,
  setup: async (ctx) => {
    conformanceRedis ??= await startRedis();
    ctx.state['url'] = conformanceRedis.url;
    ctx.state['prefix'] = `conf${prefixCounter++}`;
  },
  makeProducerConfig: (ctx) => offloadConfig(redisExtra(ctx)),
  makeConsumerConfig: (ctx) => offloadConfig(redisExtra(ctx)),
  corruptionKinds: ['corrupt'],
  corrupt: async (ctx, target) => {
    const port = conformanceRedis?.port ?? 0;
    for (const key of chunkKeys(ctx, redisExtra(ctx), target.promptTokenIds, 0)) {
      assert.equal((await redisCommand(port, `EXISTS ${ctx.state['prefix']}:${key}`)).trim(), ':1');
      await redisCommand(port, `SETRANGE ${ctx.state['prefix']}:${key} 200 CORRUPTED`);
    }
  },
});
after(async () => {
  await conformanceRedis?.stop();
});

// ---- single-engine tests ----
const PROMPTS = [0, 1, 2, 3].map((s) =>
  Array.from({ length: 64 }, (_, i) => (i * (13 + s * 2) + 53 + s) % 256),
);

interface Run {
  tokens: number[];
  last: RequestOutputDelta;
}

async function run(engine: AsyncEngine, prompt: number[], id: string): Promise<Run> {
  const tokens: number[] = [];
  let last: RequestOutputDelta | null = null;
  for await (const d of engine.generate({ requestId: id, promptTokenIds: prompt, sampling: GREEDY })) {
    tokens.push(...d.newTokenIds);
    last = d;
  }
  assert.ok(last);
  return { tokens, last };
}

const plainCache = new Map<string, Promise<number[]>>();

/** The plain engine's tokens (memoised: the same reference serves several tests). */
function plainTokens(model: ConformanceModel, prompt: number[]): Promise<number[]> {
  const key = `${model}:${prompt.join(',')}`;
  let out = plainCache.get(key);
  if (!out) {
    out = computePlainTokens(model, prompt);
    plainCache.set(key, out);
  }
  return out;
}

async function computePlainTokens(model: ConformanceModel, prompt: number[]): Promise<number[]> {
  const engine = await AsyncEngine.create({ model, block_size: 16, num_gpu_blocks: 64, max_model_len: 128 });
  try {
    return (await run(engine, prompt, 'plain')).tokens;
  } finally {
    await engine.shutdown();
  }
}

describe('redis tier failures', () => {
  test('Redis down: lookups degrade to a miss within the bound, one warning, a metric; the request completes with the right tokens', async () => {
    const reference = await plainTokens('tiny', PROMPTS[0]!);
    const port = await freePort();
    const { records } = await captureLogs(async () => {
      const engine = await AsyncEngine.create({
        model: 'tiny',
        block_size: 16,
        num_gpu_blocks: 16,
        max_model_len: 128,
        kv_transfer_config: offloadConfig({
          spec_name: 'TieringOffloadingSpec',
          secondary_tiers: [{ type: 'redis', url: `redis://127.0.0.1:${port}`, timeout_ms: 150 }],
        }),
      });
      try {
        const t0 = performance.now();
        const out = await run(engine, PROMPTS[0]!, 'down');
        const elapsed = performance.now() - t0;
        assert.deepEqual(out.tokens, reference);
        assert.equal(out.last.error, undefined);
        assert.equal(out.last.metrics.numExternalTokens, 0);
        assert.ok(elapsed < 2000, `the request took ${elapsed} ms with Redis down`);
        assert.ok(
          (out.last.metrics.queuedMs ?? 0) < 150 + 50 + 250,
          `queued ${out.last.metrics.queuedMs} ms`,
        );
        await engine.waitIdle();
        const stats = engine.stats().kvConnectorStats ?? {};
        assert.ok(
          Number(stats['offload_lookup_tier_errors']) + Number(stats['offload_tier_errors']) > 0,
          JSON.stringify(stats),
        );
        assert.ok(Number(stats['offload_tier_outages']) >= 1, JSON.stringify(stats));
      } finally {
        await engine.shutdown();
      }
    });
    const warnings = records.filter(
      (r) =>
        r.level === 'warn' && r.message.includes(`127.0.0.1:${port}`) && r.message.includes('unavailable'),
    );
    assert.ok(
      warnings.length >= 1 && warnings.length <= 2,
      `one warning per tier client and outage, got ${warnings.length}`,
    );
  });
});

describe('redis cluster tier', () => {
  let cluster: RedisClusterHandle;
  before(async () => {
    cluster = await startRedisCluster(3);
  });
  after(async () => {
    await cluster?.stop();
  });

  test('a producer engine stores through a 3-node cluster; a fresh consumer loads from it with the same tokens', async () => {
    const reference = await plainTokens('tiny', PROMPTS[2]!);
    const config = offloadConfig({
      spec_name: 'TieringOffloadingSpec',
      secondary_tiers: [
        { type: 'redis', cluster_nodes: [cluster.urls[0]], timeout_ms: 3000, key_prefix: 'cl' },
      ],
    });
    const options = {
      model: 'tiny',
      block_size: 16,
      num_gpu_blocks: 32,
      max_model_len: 128,
      kv_transfer_config: config,
    };
    const producer = await AsyncEngine.create(options);
    try {
      assert.deepEqual((await run(producer, PROMPTS[2]!, 'p')).tokens, reference);
      await producer.waitIdle();
    } finally {
      await producer.shutdown();
    }
    let keys = 0;
    for (const n of cluster.nodes) keys += Number((await redisCommand(n.port, 'DBSIZE')).slice(1));
    assert.equal(keys, 4, 'four 16-token chunks of the prompt are in the cluster');
    const consumer = await AsyncEngine.create(options);
    try {
      const out = await run(consumer, PROMPTS[2]!, 'c');
      assert.deepEqual(out.tokens, reference);
      assert.equal(out.last.metrics.numExternalTokens, 48);
    } finally {
      await consumer.shutdown();
    }
  });
});
