/**
 * OffloadingConnector over S3 (the obj tier) against a real S3-compatible server, s3rver,
 * started by the test as its own process: the shared conformance suite (a producer engine
 * stores, a fresh consumer engine sharing the bucket loads; tokens identical to a plain
 * engine; corrupt objects handled by both load-failure policies), two live engines sharing
 * one bucket under vLLM's object-key layout, the startup probe failing fast with the field
 * to fix, and the server killed mid-run (misses, counted, every request answered).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { objKeysOf } from '../../../src/connectors/offloading/obj-keys.ts';
import { AsyncEngine } from '../../../src/engine/async-engine.ts';
import { KVError } from '../../../src/errors/kv-error.ts';
import { captureLogs } from '../../../src/logging/logger.ts';
import { freePort } from '../../helpers/free-port.ts';
import { S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, type S3Server, startS3Server } from '../../helpers/s3.ts';
import { waitUntil } from '../../helpers/wait-until.ts';
import { type ConformanceContext, runConnectorConformance } from '../helpers/conformance.ts';
import {
  assertOneOutageWarning,
  assertTierOutageCounted,
  chunkKeys,
  contextRunLayout,
  offloadConfig,
  PROMPTS,
  plainTokens,
  run,
} from './helpers.ts';

const BUCKET = 'kvcache';

function storeConfig(endpoint: string, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    bucket: BUCKET,
    endpoint_override: endpoint,
    access_key: S3RVER_ACCESS_KEY,
    secret_key: S3RVER_SECRET_KEY,
    ...overrides,
  };
}

function objExtra(
  endpoint: string,
  prefix: string,
  tier: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    spec_name: 'TieringOffloadingSpec',
    secondary_tiers: [
      { type: 'obj', store_config: storeConfig(endpoint), prefix, timeout_ms: 3000, ...tier },
    ],
  };
}

function engineOptions(extra: Record<string, unknown>, gpuBlocks = 32) {
  return {
    model: 'tiny',
    block_size: 16,
    num_gpu_blocks: gpuBlocks,
    max_model_len: 128,
    kv_transfer_config: offloadConfig(extra),
  };
}

function s3Client(endpoint: string): S3Client {
  return new S3Client({
    endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    maxAttempts: 1,
    credentials: { accessKeyId: S3RVER_ACCESS_KEY, secretAccessKey: S3RVER_SECRET_KEY },
  });
}

async function listKeys(client: S3Client, prefix: string): Promise<string[]> {
  const out = await client.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: `${prefix}/` }));
  return (out.Contents ?? []).map((o) => o.Key ?? '').sort();
}

let server: S3Server | null = null;
let client: S3Client | null = null;
async function shared(): Promise<{ server: S3Server; client: S3Client }> {
  server ??= await startS3Server([BUCKET]);
  client ??= s3Client(server.endpoint);
  return { server, client };
}
after(async () => {
  client?.destroy();
  await server?.stop();
});

// ---- the connector conformance suite over the obj tier ----
let prefixCounter = 0;
const confExtra = (ctx: ConformanceContext) =>
  objExtra(ctx.state['endpoint'] as string, ctx.state['prefix'] as string);

runConnectorConformance({
  name: 'OffloadingConnector (obj tier)',
  mode: 'storage',
  supportsHybrid: true,
  setup: async (ctx) => {
    ctx.state['endpoint'] = (await shared()).server.endpoint;
    ctx.state['prefix'] = `conf${prefixCounter++}`;
  },
  makeProducerConfig: (ctx) => offloadConfig(confExtra(ctx)),
  makeConsumerConfig: (ctx) => offloadConfig(confExtra(ctx)),
  corruptionKinds: ['corrupt'],
  corrupt: async (ctx, target) => {
    const { client: c } = await shared();
    const extra = confExtra(ctx);
    const { objectKeyOf } = objKeysOf(contextRunLayout(ctx, extra), ctx.state['prefix'] as string);
    for (const key of chunkKeys(ctx, extra, target.promptTokenIds, 0)) {
      const objectKey = objectKeyOf(key);
      const got = await c.send(new GetObjectCommand({ Bucket: BUCKET, Key: objectKey }));
      const bytes = Buffer.from(await got.Body!.transformToByteArray());
      bytes.write('CORRUPTED', 200);
      await c.send(new PutObjectCommand({ Bucket: BUCKET, Key: objectKey, Body: bytes }));
    }
  },
});

describe('obj tier', () => {
  before(async () => {
    await shared();
  });

  test("two live engines share one bucket: objects under vLLM's key layout, the second loads with the same tokens", async () => {
    const { server: s3, client: c } = await shared();
    const reference = await plainTokens('tiny', PROMPTS[2]!);
    const extra = objExtra(s3.endpoint, 'shared');
    const a = await AsyncEngine.create(engineOptions(extra));
    const b = await AsyncEngine.create(engineOptions(extra));
    try {
      assert.deepEqual((await run(a, PROMPTS[2]!, 'a')).tokens, reference);
      await a.waitIdle();
      // The tier writes in the background: wait for the prompt's four 16-token chunks.
      let all: string[] = [];
      await waitUntil('four chunks in the bucket', async () => {
        all = await listKeys(c, 'shared');
        return all.filter((k) => k.endsWith('.bin')).length >= 4;
      });
      const keys = all.filter((k) => k.endsWith('.bin'));
      assert.equal(keys.length, 4, `four 16-token chunks of the prompt are in the bucket: ${all.join(', ')}`);
      const run0 = /^shared\/(tiny_[0-9a-f]{12})_r0\//.exec(keys[0] ?? '')?.[1];
      for (const k of keys) {
        assert.match(k, /^shared\/tiny_[0-9a-f]{12}_r0\/([0-9a-f]{3})\/[0-9a-f]{2}_g0\/\1[0-9a-f]+\.bin$/);
        assert.ok(k.startsWith(`shared/${run0}_r0/`), 'one namespace');
      }
      const manifestKey = `shared/${run0}/config.json`;
      assert.deepEqual(
        all.filter((k) => !k.endsWith('.bin')),
        [manifestKey],
        'the run configuration, written once',
      );
      const manifest = await c.send(new GetObjectCommand({ Bucket: BUCKET, Key: manifestKey }));
      assert.equal(JSON.parse(await manifest.Body!.transformToString()).model_name, 'tiny');
      const out = await run(b, PROMPTS[2]!, 'b');
      assert.deepEqual(out.tokens, reference);
      assert.equal(out.last.metrics.numExternalTokens, 48);
    } finally {
      await a.shutdown();
      await b.shutdown();
    }
  });

  test('startup fails fast, naming the field to fix: unreachable endpoint, unknown bucket, unknown access key', async () => {
    const { server: s3 } = await shared();
    const dead = `http://127.0.0.1:${await freePort()}`;
    const cases: [string, Record<string, unknown>, string][] = [
      ['endpoint_override', storeConfig(dead), dead],
      ['bucket', storeConfig(s3.endpoint, { bucket: 'no-such-bucket' }), 'no-such-bucket'],
      ['access_key', storeConfig(s3.endpoint, { access_key: 'NOT-A-KEY' }), 'access key'],
    ];
    for (const [field, sc, mentions] of cases) {
      const t0 = performance.now();
      await assert.rejects(
        AsyncEngine.create(
          engineOptions({
            spec_name: 'TieringOffloadingSpec',
            secondary_tiers: [{ type: 'obj', store_config: sc, timeout_ms: 1000 }],
          }),
        ),
        (err: unknown) => {
          assert.ok(err instanceof KVError, String(err));
          assert.equal(err.code, 'KV_OFFLOAD_TIER_UNREACHABLE');
          assert.equal(err.field, `kv_connector_extra_config.secondary_tiers[0].store_config.${field}`);
          assert.ok(`${err.message} ${err.hint}`.includes(mentions), `${err.message} / ${err.hint}`);
          return true;
        },
      );
      // Loose bound for a loaded machine; a probe that waited for retries or a default timeout would not meet it.
      assert.ok(
        performance.now() - t0 < 15_000,
        `${field}: startup took ${performance.now() - t0} ms to fail`,
      );
    }
  });

  test('the server killed mid-run: lookups and stores are misses, counted and warned once; every request answered with the plain tokens', async () => {
    const s3 = await startS3Server([BUCKET]);
    try {
      const references = [await plainTokens('tiny', PROMPTS[0]!), await plainTokens('tiny', PROMPTS[1]!)];
      const extra = objExtra(s3.endpoint, 'killed', { timeout_ms: 300 });
      const producer = await AsyncEngine.create(engineOptions(extra));
      try {
        assert.deepEqual((await run(producer, PROMPTS[0]!, 'p')).tokens, references[0]);
        await producer.waitIdle();
      } finally {
        await producer.shutdown();
      }
      const { records } = await captureLogs(async () => {
        const engine = await AsyncEngine.create(engineOptions(extra));
        try {
          await s3.kill();
          const t0 = performance.now();
          const outs = await Promise.all([run(engine, PROMPTS[0]!, 'k0'), run(engine, PROMPTS[1]!, 'k1')]);
          assert.ok(
            performance.now() - t0 < 15_000,
            `requests took ${performance.now() - t0} ms with S3 down`,
          );
          outs.forEach((out, i) => {
            assert.deepEqual(out.tokens, references[i]);
            assert.equal(out.last.error, undefined);
            assert.equal(out.last.metrics.numExternalTokens, 0, 'nothing loaded from a dead server');
          });
          await assertTierOutageCounted(engine);
        } finally {
          await engine.shutdown();
        }
      });
      assertOneOutageWarning(records, s3.endpoint);
    } finally {
      await s3.stop();
    }
  });
});
