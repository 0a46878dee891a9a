/**
 * OffloadingConnector over Redis: the shared conformance suite with a single-server Redis
 * tier, Redis down (recompute within the bound, a warning, a metric), and a producer and a
 * consumer engine sharing a 3-node Redis Cluster. Every server is started by the test.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { AsyncEngine } from '../../../src/engine/async-engine.ts';
import { captureLogs } from '../../../src/logging/logger.ts';
import { freePort } from '../../helpers/free-port.ts';
import {
  type RedisClusterHandle,
  type RedisServer,
  redisCommand,
  startRedis,
  startRedisCluster,
} from '../../helpers/redis.ts';
import { type ConformanceContext, runConnectorConformance } from '../helpers/conformance.ts';
import {
  assertOneOutageWarning,
  assertTierOutageCounted,
  chunkKeys,
  createSmallOffloadEngine,
  offloadConfig,
  PROMPTS,
  plainTokens,
  run,
} from './helpers.ts';

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
describe('redis tier failures', () => {
  test('Redis down: lookups degrade to a miss within the bound, one warning, a metric; the request completes with the right tokens', async () => {
    const reference = await plainTokens('tiny', PROMPTS[0]!);
    const port = await freePort();
    const { records } = await captureLogs(async () => {
      const engine = await createSmallOffloadEngine({
        spec_name: 'TieringOffloadingSpec',
        secondary_tiers: [{ type: 'redis', url: `redis://127.0.0.1:${port}`, timeout_ms: 150 }],
      });
      try {
        const t0 = performance.now();
        const out = await run(engine, PROMPTS[0]!, 'down');
        const elapsed = performance.now() - t0;
        assert.deepEqual(out.tokens, reference);
        assert.equal(out.last.error, undefined);
        assert.equal(out.last.metrics.numExternalTokens, 0);
        // Bounds loose enough for a loaded machine; a lookup that waited for Redis would never end.
        assert.ok(elapsed < 10_000, `the request took ${elapsed} ms with Redis down`);
        assert.ok((out.last.metrics.queuedMs ?? 0) < 150 + 2000, `queued ${out.last.metrics.queuedMs} ms`);
        await assertTierOutageCounted(engine);
      } finally {
        await engine.shutdown();
      }
    });
    assertOneOutageWarning(records, `127.0.0.1:${port}`);
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
