/**
 * The vLLM key layout: digests and names checked against values computed with vLLM's own
 * recipe in CPython (`hashlib.sha256(json.dumps(fields, sort_keys=True,
 * separators=(",", ":")).encode()).hexdigest()[:12]`, and `json.dumps(fields, indent=2,
 * sort_keys=True)` for config.json), so a change of serialisation fails here.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  blockKey,
  blockSubPath,
  canonicalRunConfigJson,
  configDigest,
  configDir,
  configFilePath,
  isBlockGroupDir,
  isBlockPrefixDir,
  parseBlockSubPath,
  type RunConfigFields,
  runConfigFileText,
  runLayoutFor,
} from '../../../src/connectors/offloading/vllm-key-layout.ts';
import { tinyEngineConfig, tinyKvCacheConfig } from './helpers.ts';

const LLAMA: RunConfigFields = {
  model_name: 'meta-llama/Llama-3.1-8B-Instruct',
  tokens_per_hash: 16,
  blocks_per_file: 1,
  tp_size: 1,
  pp_size: 1,
  pcp_size: 1,
  dcp_size: 1,
  dtype: 'auto',
  kv_cache_groups: [
    { tokens_per_block: 16, layer_names: ['model.layers.0.self_attn.attn', 'model.layers.1.self_attn.attn'] },
  ],
  inference_engine: 'vllm',
};

test("the digest is vLLM's: sha256 of the sorted compact JSON, 12 hex digits", () => {
  assert.equal(
    canonicalRunConfigJson(LLAMA),
    '{"blocks_per_file":1,"dcp_size":1,"dtype":"auto","inference_engine":"vllm","kv_cache_groups":[{"layer_names":["model.layers.0.self_attn.attn","model.layers.1.self_attn.attn"],"tokens_per_block":16}],"model_name":"meta-llama/Llama-3.1-8B-Instruct","pcp_size":1,"pp_size":1,"tokens_per_hash":16,"tp_size":1}',
  );
  assert.equal(configDigest(LLAMA), '8e8acbc6e576');
});

test('optional fields, non-ASCII names and escapes serialise as Python does', () => {
  const fields: RunConfigFields = {
    ...LLAMA,
    model_name: 'Qwen/Qwén-ü',
    parallel_agnostic: false,
    tp_size: 2,
    storage_format: 'x"y\n\t\u0001',
  };
  assert.equal(configDigest(fields), '43aea6688ef4');
  const text = runConfigFileText(fields);
  assert.match(text, /^{\n {2}"blocks_per_file": 1,\n/);
  assert.ok(text.includes('"model_name": "Qwen/Qw\\u00e9n-\\u00fc",'), text);
  assert.ok(text.includes('"storage_format": "x\\"y\\n\\t\\u0001",'), text);
  assert.ok(text.includes('"layer_names": [\n        "model.layers.0.self_attn.attn",\n'), text);
});

test('directory, config file and block names follow the documented layout', () => {
  assert.equal(configDir('/mnt/kv', LLAMA), '/mnt/kv/meta-llama_Llama-3.1-8B-Instruct_8e8acbc6e576');
  assert.equal(
    configFilePath('/mnt/kv', LLAMA),
    '/mnt/kv/meta-llama_Llama-3.1-8B-Instruct_8e8acbc6e576/config.json',
  );
  const hash = 'abcdef0123456789'.repeat(4);
  assert.equal(
    blockKey('/mnt/kv', { fields: LLAMA, rank: 3 }, hash, 2),
    `/mnt/kv/meta-llama_Llama-3.1-8B-Instruct_8e8acbc6e576_r3/abc/de_g2/${hash}.bin`,
  );
  assert.deepEqual(parseBlockSubPath(blockSubPath(hash, 2)), { group: 2, hashHex: hash });
  assert.equal(parseBlockSubPath(`abc/df_g2/${hash}.bin`), null, 'a file in the wrong shard is not a block');
  assert.equal(parseBlockSubPath(`abc/de_g2/${hash}.bin_1.tmp`), null);
  // The directory levels a scan of the store walks are blockSubPath's, and only those.
  const [prefix, group] = blockSubPath(hash, 12).split('/') as [string, string];
  assert.deepEqual([isBlockPrefixDir(prefix), isBlockGroupDir(group)], [true, true]);
  assert.deepEqual(
    [isBlockPrefixDir('abcd'), isBlockGroupDir('de_g'), isBlockGroupDir('dex_g1')],
    [false, false, false],
  );
});

test("kvconnect's run configuration: vLLM's fields, its own engine name, one digest per layout", () => {
  const engine = tinyEngineConfig();
  const kv = tinyKvCacheConfig(engine);
  const a = runLayoutFor(engine, kv, 1);
  assert.equal(a.rank, 0);
  assert.equal(a.fields.model_name, engine.model.model);
  assert.equal(a.fields.inference_engine, 'kvconnect');
  assert.equal(a.fields.tokens_per_hash, engine.cache.blockSize);
  assert.equal(a.fields.kv_cache_groups.length, kv.groups.length);
  assert.deepEqual(runLayoutFor(engine, kv, 1), a, 'the same configuration gives the same layout');
  const digests = new Set([
    configDigest(a.fields),
    configDigest(runLayoutFor(engine, kv, 2).fields),
    configDigest(runLayoutFor({ ...engine, model: { ...engine.model, model: 'other' } }, kv, 1).fields),
    configDigest(
      runLayoutFor({ ...engine, cache: { ...engine.cache, cacheDtype: 'float16' } }, kv, 1).fields,
    ),
  ]);
  assert.equal(digests.size, 4, 'chunk size, model and dtype each change the digest');
});
