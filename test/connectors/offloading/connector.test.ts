/**
 * OffloadingConnector end to end: the shared conformance suite over the fs tier
 * (a fresh consumer engine has an empty CPU tier, so every load is a promotion from the
 * secondary tier through the CPU tier), the CPU tier within one engine (GPU prefix cache
 * evicted, KV reloaded from CPU; also with tp 2), and promotion when the CPU tier is too
 * small. The Redis tier is in offloading-redis.test.ts.
 */
import assert from 'node:assert/strict';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';
import { FsTier } from '../../../src/connectors/offloading/fs-tier.ts';
import { AsyncEngine } from '../../../src/engine/async-engine.ts';
import { type ConformanceContext, runConnectorConformance } from '../helpers/conformance.ts';
import {
  chunkKeys,
  contextRunLayout,
  createSmallOffloadEngine,
  offloadConfig,
  PROMPTS,
  plainTokens,
  type Run,
  run,
} from './helpers.ts';

// ---- fs tier ----
const fsExtra = (ctx: ConformanceContext) => ({
  spec_name: 'TieringOffloadingSpec',
  secondary_tiers: [{ type: 'fs', root_dir: `${ctx.dir}/tier`, timeout_ms: 2000 }],
});

runConnectorConformance({
  name: 'OffloadingConnector (fs tier)',
  mode: 'storage',
  supportsHybrid: true,
  makeProducerConfig: (ctx) => offloadConfig(fsExtra(ctx)),
  makeConsumerConfig: (ctx) => offloadConfig(fsExtra(ctx)),
  corruptionKinds: ['corrupt'],
  corrupt: (ctx, target) => {
    const tier = new FsTier({
      rootDir: `${ctx.dir}/tier`,
      run: contextRunLayout(ctx, fsExtra(ctx)),
      capacityBytes: null,
      timeoutMs: 2000,
    });
    // A flipped payload byte keeps the header valid, so the lookup promises the chunk and the
    // load finds the damage (a truncated file is already a miss at the lookup).
    for (const key of chunkKeys(ctx, fsExtra(ctx), target.promptTokenIds, 0)) {
      const file = tier.fileOf(key);
      const bytes = readFileSync(file);
      bytes[200] = (bytes[200] ?? 0) ^ 0xff;
      writeFileSync(file, bytes);
    }
  },
});

// ---- single-engine tests ----
/** Runs PROMPTS[0], then the others (evicting it from the small GPU pool), then PROMPTS[0] again. */
async function evictAndRepeat(engine: AsyncEngine): Promise<{ first: Run; again: Run }> {
  const first = await run(engine, PROMPTS[0]!, 'first');
  for (let i = 1; i < PROMPTS.length; i++) await run(engine, PROMPTS[i]!, `other-${i}`);
  const again = await run(engine, PROMPTS[0]!, 'again');
  return { first, again };
}

for (const [model, tp] of [
  ['tiny', 1],
  ['tiny-hybrid', 1],
  ['tiny', 2],
] as const) {
  test(`CPU tier (${model}${model === 'tiny-hybrid' ? ', HMA on' : ''}, tp ${tp}): KV evicted from the GPU is reloaded from CPU, same tokens`, async () => {
    const reference = await plainTokens(model, PROMPTS[0]!);
    const engine = await AsyncEngine.create({
      model,
      tensor_parallel_size: tp,
      block_size: 16,
      num_gpu_blocks: model === 'tiny' ? 16 : 26,
      max_model_len: 128,
      disable_hybrid_kv_cache_manager: model === 'tiny-hybrid' ? false : null,
      kv_transfer_config: offloadConfig({}),
    });
    try {
      const { first, again } = await evictAndRepeat(engine);
      assert.deepEqual(first.tokens, reference);
      assert.deepEqual(again.tokens, reference);
      assert.equal(again.last.metrics.numLocalCachedTokens, 0, 'the GPU prefix cache was evicted');
      assert.equal(again.last.metrics.numExternalTokens, 48, 'three 16-token chunks come from the CPU tier');
      assert.equal(again.last.metrics.numLocalComputedTokens, 16);
      await engine.waitIdle();
      assert.equal(engine.stats().kvCacheUsage, 0);
    } finally {
      await engine.shutdown();
    }
  });
}

test('CPU tier too small for the prompt: a secondary fs tier serves the evicted chunks (promotion through CPU)', async () => {
  const dir = (await import('node:fs')).mkdtempSync(
    `${(await import('node:os')).tmpdir()}/kvconnect-offload-`,
  );
  try {
    const reference = await plainTokens('tiny', PROMPTS[0]!);
    const engine = await createSmallOffloadEngine({
      cpu_bytes_to_use: 3 * 32768,
      spec_name: 'TieringOffloadingSpec',
      secondary_tiers: [{ type: 'fs', root_dir: dir }],
    });
    try {
      const { again } = await evictAndRepeat(engine);
      assert.deepEqual(again.tokens, reference);
      assert.equal(again.last.metrics.numExternalTokens, 48);
      const stats = engine.stats().kvConnectorStats ?? {};
      assert.ok(
        Number(stats['offload_promoted_chunks']) >= 3,
        `promoted ${stats['offload_promoted_chunks']}`,
      );
      assert.ok(Number(stats['offload_cpu_evicted_chunks']) > 0);
    } finally {
      await engine.shutdown();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
