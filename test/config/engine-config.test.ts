import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { Command } from 'commander';
import { addEngineOptions, engineOptionsFromCommander } from '../../src/cli/engine-flags.ts';
import { buildEngineConfig } from '../../src/config/engine-config.ts';
import { ENGINE_OPTION_NAMES, ENGINE_OPTIONS, optionFlag } from '../../src/config/engine-options.ts';
import { KVTransferConfig } from '../../src/config/kv-transfer-config.ts';
import { resolveModelInfo, totalKvHeads } from '../../src/config/model-info.ts';
import { MODEL_PRESETS } from '../../src/config/model-presets.ts';
import { KVError } from '../../src/errors/kv-error.ts';
import { buildKVCacheConfig } from '../../src/kv/kv-cache-config.ts';

test('defaults: vLLM-style engine config with a 64 MiB KV budget and auto HMA', () => {
  const c = buildEngineConfig();
  // The default model is the bundled kjv-llama; max_model_len is its max_position_embeddings.
  assert.deepEqual(c.model, {
    model: 'kjv-llama',
    servedModelName: 'kjv-llama',
    maxModelLen: 1024,
    seed: 0,
    dtype: 'auto',
  });
  assert.equal(buildEngineConfig({ model: 'tiny' }).model.maxModelLen, 4096);
  assert.deepEqual(c.cache, {
    blockSize: 16,
    numGpuBlocks: null,
    kvCacheMemoryBytes: 64 * 2 ** 20,
    cacheDtype: 'float32',
    enablePrefixCaching: true,
    prefixCachingHashAlgo: 'sha256_cbor',
    kvOffloadingSize: null,
    kvOffloadingBackend: 'native',
  });
  assert.deepEqual(c.scheduler, {
    maxNumSeqs: 64,
    maxNumBatchedTokens: 2048,
    enableChunkedPrefill: true,
    disableHybridKvCacheManager: null,
  });
  assert.deepEqual(c.parallel, {
    tensorParallelSize: 1,
    numThreads: null,
    dataParallelSize: 1,
    dataParallelRank: 0,
    dataParallelSizeLocal: 1,
  });
  assert.equal(c.kvTransferConfig, null);
  assert.equal(buildEngineConfig({ num_gpu_blocks: 100 }).cache.kvCacheMemoryBytes, null);
  assert.equal(buildEngineConfig({ kv_cache_memory_bytes: '1G' }).cache.kvCacheMemoryBytes, 2 ** 30);
});

test('options are validated with the option name, the expectation and a hint', () => {
  const cases: [Record<string, unknown>, string][] = [
    [{ block_size: 0 }, 'block_size'],
    [{ block_size: 'big' }, 'block_size'],
    [{ cache_dtype: 'fp8' }, 'cache_dtype'],
    [{ dtype: 'fp8' }, 'dtype'],
    [{ num_threads: 0 }, 'num_threads'],
    [{ num_threads: 'all' }, 'num_threads'],
    [{ num_threads: 65 }, 'num_threads'],
    [{ data_parallel_rank: 2, data_parallel_size: 2 }, 'data_parallel_rank'],
    [{ enable_chunked_prefill: false, max_num_batched_tokens: 512 }, 'max_num_batched_tokens'],
    [{ blocksize: 16 }, 'blocksize'],
    [{ kv_transfer_config: { kv_connector: 'NixlConnector' } }, 'kv_role'],
  ];
  for (const [input, field] of cases) {
    assert.throws(
      () => buildEngineConfig(input),
      (e: unknown) => e instanceof KVError && e.field === field && !!e.hint,
      JSON.stringify(input),
    );
  }
  const unknown = (() => {
    try {
      buildEngineConfig({ blocksize: 16 } as Record<string, unknown>);
    } catch (e) {
      return e as KVError;
    }
  })();
  assert.match(unknown?.hint ?? '', /did you mean 'block_size'\?/);
});

test("--dtype takes vLLM's names and aliases; --num-threads errors say what is expected", () => {
  assert.equal(buildEngineConfig({ dtype: 'half' }).model.dtype, 'float16');
  assert.equal(buildEngineConfig({ dtype: 'float' }).model.dtype, 'float32');
  assert.equal(buildEngineConfig({ dtype: 'bfloat16' }).model.dtype, 'bfloat16');
  assert.equal(buildEngineConfig({ num_threads: '2' }).parallel.numThreads, 2);
  const error = (input: Record<string, unknown>): KVError => {
    try {
      buildEngineConfig(input);
    } catch (e) {
      return e as KVError;
    }
    throw new Error(`${JSON.stringify(input)} was accepted`);
  };
  const zero = error({ num_threads: 0 });
  assert.match(zero.message, /num_threads: expected an integer >= 1, received 0/);
  assert.match(zero.hint ?? '', /--num-threads/);
  const many = error({ num_threads: 65 });
  assert.match(many.message, /num_threads: must be at most 64, received 65/);
  assert.match(many.hint ?? '', /--num-threads/);
  const dtype = error({ dtype: 'fp8' });
  assert.match(dtype.message, /"bfloat16"/);
  assert.match(dtype.message, /fp8/);
});

test('the transfer config is accepted as JSON, object or instance', () => {
  const json = buildEngineConfig({
    kv_transfer_config: '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}',
  });
  assert.equal(json.kvTransferConfig?.isKvProducer, true);
  const inst = KVTransferConfig.fromObject({ kv_role: 'kv_both' });
  assert.equal(buildEngineConfig({ kv_transfer_config: inst }).kvTransferConfig, inst);
});

test('CLI flags, help and defaults come from the one option table', () => {
  const cmd = addEngineOptions(new Command('x').exitOverride());
  for (const name of ENGINE_OPTION_NAMES) {
    const def = ENGINE_OPTIONS[name];
    const option = cmd.options.find((o) => o.long === optionFlag(name));
    assert.ok(option, name);
    assert.ok(option.description.startsWith(def.help), name);
  }
  cmd.parse(
    [
      '--block-size',
      '32',
      '--no-enable-prefix-caching',
      '--disable-hybrid-kv-cache-manager',
      '--model',
      'tiny-hybrid',
    ],
    {
      from: 'user',
    },
  );
  const opts = engineOptionsFromCommander(cmd.opts());
  assert.deepEqual(opts, {
    model: 'tiny-hybrid',
    block_size: '32',
    enable_prefix_caching: false,
    disable_hybrid_kv_cache_manager: true,
  });
  const c = buildEngineConfig(opts);
  assert.deepEqual(
    [c.cache.blockSize, c.cache.enablePrefixCaching, c.scheduler.disableHybridKvCacheManager],
    [32, false, true],
  );
  const forced = addEngineOptions(new Command('y').exitOverride());
  forced.parse(['--no-disable-hybrid-kv-cache-manager'], { from: 'user' });
  assert.equal(
    buildEngineConfig(engineOptionsFromCommander(forced.opts())).scheduler.disableHybridKvCacheManager,
    false,
  );
});

test('model info: presets, a directory with config.json, and clear errors', () => {
  assert.equal(resolveModelInfo('tiny').isHybrid, false);
  const hybrid = resolveModelInfo('tiny-hybrid');
  assert.deepEqual(
    [hybrid.isHybrid, hybrid.numFullAttentionLayers, hybrid.numSlidingWindowLayers],
    [true, 2, 4],
  );
  const dir = mkdtempSync(path.join(tmpdir(), 'kvconnect-model-'));
  try {
    const modelDir = path.join(dir, 'my-model');
    mkdirSync(modelDir);
    writeFileSync(path.join(modelDir, 'config.json'), JSON.stringify(MODEL_PRESETS['tiny-hybrid']!.config));
    const info = resolveModelInfo('my-model', dir);
    assert.deepEqual([info.source, info.isHybrid, info.directory], ['directory', true, modelDir]);
    writeFileSync(path.join(modelDir, 'config.json'), '{"hidden_size": 4}');
    assert.throws(
      () => resolveModelInfo(modelDir),
      (e: unknown) => e instanceof KVError && e.code === 'KV_MODEL_CONFIG_INVALID',
    );
    mkdirSync(path.join(dir, 'empty'));
    assert.throws(
      () => resolveModelInfo('empty', dir),
      (e: unknown) => e instanceof KVError && e.code === 'KV_MODEL_NOT_FOUND',
    );
    assert.throws(
      () => resolveModelInfo('tiny-hybird', dir),
      (e: unknown) =>
        e instanceof KVError &&
        e.code === 'KV_MODEL_NOT_FOUND' &&
        /tiny, tiny-hybrid, small/.test(e.hint ?? ''),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('totalKvHeads: the model config’s KV heads, whatever one tensor-parallel rank holds', () => {
  const small = MODEL_PRESETS['small']!.config;
  for (const tp of [1, 2, 4, 8]) {
    const rank = buildKVCacheConfig({
      hfConfig: small,
      numBlocks: 4,
      maxModelLen: 32,
      tensorParallelSize: tp,
    });
    // Sharded up to tp = heads (4 → 4, 2, 1 per rank), then one replicated head per rank.
    assert.equal(rank.groups[0]!.spec.numKvHeads, Math.max(1, small.num_key_value_heads / tp), `tp ${tp}`);
    assert.equal(totalKvHeads('small'), small.num_key_value_heads);
  }
  const dir = mkdtempSync(path.join(tmpdir(), 'kvconnect-heads-'));
  try {
    writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ ...small, num_key_value_heads: 6 }));
    assert.equal(totalKvHeads(dir), 6);
    assert.throws(() => totalKvHeads(path.join(dir, 'missing')), { code: 'KV_MODEL_NOT_FOUND' });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
