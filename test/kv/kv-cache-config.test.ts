import assert from 'node:assert/strict';
import { test } from 'node:test';
import { attentionLayerName, getModelPreset } from '../../src/config/model-presets.ts';
import { KVError } from '../../src/errors/index.ts';
import { buildKVCacheConfig, HMA_DISABLED_WARNING, kvHeadsPerRank } from '../../src/kv/index.ts';
import { captureLogs } from '../../src/logging/logger.ts';

const tiny = getModelPreset('tiny')!.config;
const hybrid = getModelPreset('tiny-hybrid')!.config;
const L = attentionLayerName;

test('tiny: one full-attention group, one tensor per layer, page size from the geometry', () => {
  const cfg = buildKVCacheConfig({
    hfConfig: tiny,
    blockSize: 16,
    dtype: 'float16',
    numBlocks: 300,
    maxModelLen: 1024,
  });
  assert.equal(cfg.groups.length, 1);
  assert.deepEqual(cfg.groups[0]!.layerNames, [0, 1, 2, 3].map(L));
  const spec = cfg.groups[0]!.spec;
  assert.equal(spec.kind, 'full_attention');
  assert.equal(spec.pageSizeBytes, 2 * 16 * 2 * 32 * 2);
  assert.equal(cfg.tensors.length, 4);
  assert.deepEqual(cfg.tensors[2], { size: 300 * spec.pageSizeBytes, sharedBy: [L(2)] });
});

test('tiny-hybrid with HMA: 3 groups of 2 layers, the i-th layers of each group share a tensor', () => {
  const cfg = buildKVCacheConfig({ hfConfig: hybrid, blockSize: 16, numBlocks: 1000 });
  assert.deepEqual(
    cfg.groups.map((g) => [g.spec.kind, g.layerNames]),
    [
      ['full_attention', [L(0), L(3)]],
      ['sliding_window', [L(1), L(2)]],
      ['sliding_window', [L(4), L(5)]],
    ],
  );
  assert.equal(cfg.groups[1]!.spec.slidingWindow, 32);
  assert.deepEqual(
    cfg.tensors.map((t) => t.sharedBy),
    [
      [L(0), L(1), L(4)],
      [L(3), L(2), L(5)],
    ],
  );
});

test('HMA off: sliding layers promoted to full attention in one group, with vLLM warning', async () => {
  const { result, records } = await captureLogs(() =>
    buildKVCacheConfig({ hfConfig: hybrid, numBlocks: 1000, hybridEnabled: false }),
  );
  assert.equal(result.groups.length, 1);
  assert.equal(result.groups[0]!.layerNames.length, 6);
  assert.equal(result.groups[0]!.spec.kind, 'full_attention');
  assert.equal(result.groups[0]!.spec.slidingWindow, 32);
  assert.equal(result.tensors.length, 6);
  assert.ok(records.some((r) => r.level === 'warn' && r.message === HMA_DISABLED_WARNING));
});

test('KV heads per rank: split, replicated beyond the head count, rejected when incompatible', () => {
  assert.equal(kvHeadsPerRank(tiny, 1), 2);
  assert.equal(kvHeadsPerRank(tiny, 2), 1);
  assert.equal(kvHeadsPerRank(tiny, 4), 1);
  assert.throws(
    () => kvHeadsPerRank(tiny, 3),
    (e: unknown) => e instanceof KVError && e.code === 'KV_TP_MISMATCH',
  );
  const cfg = buildKVCacheConfig({ hfConfig: tiny, numBlocks: 300, tensorParallelSize: 2 });
  assert.equal(cfg.groups[0]!.spec.numKvHeads, 1);
});

test('sizing from a byte budget, and a clear error when one max-length request cannot fit', () => {
  const page = 2 * 16 * 2 * 32 * 4;
  const cfg = buildKVCacheConfig({ hfConfig: tiny, memoryBytes: 4 * page * 100 + 5, maxModelLen: 1024 });
  assert.equal(cfg.numBlocks, 100);
  assert.throws(
    () => buildKVCacheConfig({ hfConfig: tiny, memoryBytes: 4 * page * 64, maxModelLen: 1024 }),
    (e: unknown) =>
      e instanceof KVError &&
      e.code === 'KV_CACHE_TOO_SMALL' &&
      e.field === 'cache.kv_cache_memory_bytes' &&
      e.message.includes('(1024)') &&
      (e.hint ?? '').includes(String(4 * page * 65)),
  );
  assert.throws(
    () => buildKVCacheConfig({ hfConfig: tiny, numBlocks: 64, maxModelLen: 1024 }),
    (e: unknown) => e instanceof KVError && e.field === 'cache.num_gpu_blocks',
  );
  assert.equal(buildKVCacheConfig({ hfConfig: tiny, numBlocks: 65, maxModelLen: 1024 }).numBlocks, 65);
  assert.throws(
    () => buildKVCacheConfig({ hfConfig: tiny }),
    (e: unknown) => e instanceof KVError && e.code === 'KV_CACHE_SIZE_MISSING',
  );
});
