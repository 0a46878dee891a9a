/**
 * The fs tier across real processes: engines with the same configuration that share a
 * `root_dir` share blocks (the second engine loads what the first stored and answers with
 * the same tokens), files are laid out as vLLM lays them out, and an engine with another
 * configuration uses its own directory and never reads the first one's files.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { buildEngineConfig } from '../../../src/config/engine-config.ts';
import { resolveModelInfo } from '../../../src/config/model-info.ts';
import {
  configDigest,
  type RunConfigFields,
  runLayoutFor,
} from '../../../src/connectors/offloading/vllm-key-layout.ts';
import type { LLMOptions } from '../../../src/engine/llm.ts';
import { buildKVCacheConfig } from '../../../src/kv/kv-cache-config.ts';
import { EngineChild } from '../../faults/helpers/engine-child.ts';
import { waitUntil } from '../../helpers/wait-until.ts';
import { PROMPTS, plainTokens, tieredEngineOptions } from './helpers.ts';

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function engineOptions(root: string, extra: Record<string, unknown> = {}): LLMOptions {
  const options = tieredEngineOptions(
    { type: 'fs', root_dir: root, n_read_threads: 2, n_write_threads: 2, timeout_ms: 5000 },
    'fail',
  );
  const ktc = options.kv_transfer_config as { kv_connector_extra_config: Record<string, unknown> };
  Object.assign(ktc.kv_connector_extra_config, extra);
  return options as LLMOptions;
}

/** The run configuration the engines of engineOptions write (computed here, independently of the tier). */
function expectedFields(blocksPerChunk: number): RunConfigFields {
  const engineConfig = buildEngineConfig({
    model: 'tiny',
    block_size: 16,
    num_gpu_blocks: 32,
    max_model_len: 128,
  });
  const kvCacheConfig = buildKVCacheConfig({
    hfConfig: resolveModelInfo('tiny').hfConfig,
    blockSize: 16,
    numBlocks: 32,
    hybridEnabled: false,
    maxModelLen: 128,
  });
  return runLayoutFor(engineConfig, kvCacheConfig, blocksPerChunk).fields;
}

function binFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.bin'));
}

async function withChild<T>(options: LLMOptions, fn: (c: EngineChild) => Promise<T>): Promise<T> {
  const child = await new EngineChild(options).ready();
  try {
    return await fn(child);
  } finally {
    await child.kill();
  }
}

test('two engines sharing root_dir share blocks; another configuration never collides', async () => {
  const root = mkdtempSync(path.join(os.tmpdir(), 'kvconnect-fs-shared-'));
  dirs.push(root);
  const prompt = PROMPTS[0]!;
  const plain = await plainTokens('tiny', prompt);

  const first = await withChild(engineOptions(root), async (a) => {
    const out = await a.generate(prompt, 6);
    // 64 prompt tokens: three full 16-token chunks before the last (computed) token's chunk.
    await waitUntil('engine A to store its chunks', () => (binFiles(root).length >= 3 ? true : null));
    return out;
  });
  assert.deepEqual(first.tokenIds, plain, "engine A answers with the plain engine's tokens");
  assert.equal(first.externalTokens, 0, 'engine A computed everything');

  const fields = expectedFields(1);
  const runDir = `tiny_${configDigest(fields)}`;
  assert.deepEqual(
    JSON.parse(readFileSync(path.join(root, runDir, 'config.json'), 'utf8')),
    JSON.parse(JSON.stringify(fields)),
    'config.json holds the hashed run configuration',
  );
  const stored = binFiles(root);
  for (const f of stored) {
    assert.match(f, new RegExp(`^${runDir}_r0/([0-9a-f]{3})/([0-9a-f]{2})_g0/\\1\\2[0-9a-f]{59}\\.bin$`), f);
  }

  const second = await withChild(engineOptions(root), (b) => b.generate(prompt, 6));
  assert.deepEqual(second.tokenIds, plain, 'engine B answers with the same tokens');
  assert.ok(
    second.externalTokens >= 48,
    `engine B loaded the prefix from the tier (${second.externalTokens} tokens)`,
  );

  // Two-block chunks: another run configuration, another directory; nothing of A's is read.
  const other = await withChild(engineOptions(root, { blocks_per_chunk: 2 }), async (c) => {
    const out = await c.generate(prompt, 6);
    await waitUntil('engine C to store its chunk', () =>
      binFiles(root).some((f) => !f.startsWith(`${runDir}_r0/`)) ? true : null,
    );
    return out;
  });
  assert.deepEqual(other.tokenIds, plain);
  assert.equal(other.externalTokens, 0, "a different configuration does not load engine A's blocks");
  const otherDir = `tiny_${configDigest(expectedFields(2))}`;
  assert.notEqual(otherDir, runDir);
  assert.deepEqual(
    readdirSync(root).sort(),
    [runDir, `${runDir}_r0`, otherDir, `${otherDir}_r0`].sort(),
    'each configuration has its own directories',
  );
  assert.deepEqual(
    binFiles(root)
      .filter((f) => f.startsWith(`${runDir}_r0/`))
      .sort(),
    stored.sort(),
    "engine A's files are untouched",
  );
});
