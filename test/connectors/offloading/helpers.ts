/**
 * Shared by the OffloadingConnector end-to-end tests (fs tier and Redis tier): the connector
 * config, the tier keys of a chunk as the engine computes them, the prompts, one greedy run
 * and the plain engine's reference tokens.
 */
import assert from 'node:assert/strict';
import { buildEngineConfig } from '../../../src/config/engine-config.ts';
import { resolveModelInfo } from '../../../src/config/model-info.ts';
import type { EngineConfig } from '../../../src/config/types.ts';
import { parseOffloadingConfig } from '../../../src/connectors/offloading/config.ts';
import { OffloadLayout } from '../../../src/connectors/offloading/layout.ts';
import { type RunLayout, runLayoutFor } from '../../../src/connectors/offloading/vllm-key-layout.ts';
import type { RequestOutputDelta } from '../../../src/engine/api.ts';
import { AsyncEngine } from '../../../src/engine/async-engine.ts';
import { samplingParams } from '../../../src/engine/llm.ts';
import { BlockHashFunction } from '../../../src/kv/block-hash.ts';
import type { KVCacheConfig } from '../../../src/kv/interfaces.ts';
import { buildKVCacheConfig } from '../../../src/kv/kv-cache-config.ts';
import type { LogRecord } from '../../../src/logging/logger.ts';
import type { ConformanceContext, ConformanceModel } from '../helpers/conformance.ts';

export const MiB = 1 << 20;
export const GREEDY = samplingParams({ maxTokens: 6, temperature: 0, ignoreEos: true });

export function offloadConfig(extra: Record<string, unknown>): Record<string, unknown> {
  return {
    kv_connector: 'OffloadingConnector',
    kv_role: 'kv_both',
    kv_connector_extra_config: { cpu_bytes_to_use: 16 * MiB, ...extra },
  };
}

/**
 * Engine options for `tiny` (32 GPU blocks of 16 tokens, max_model_len 128) that offload to
 * one secondary tier (TieringOffloadingSpec) with the given load-failure policy.
 */
export function tieredEngineOptions(
  tier: Record<string, unknown>,
  policy: 'fail' | 'recompute',
): {
  model: string;
  block_size: number;
  num_gpu_blocks: number;
  max_model_len: number;
  kv_transfer_config: Record<string, unknown>;
} {
  return {
    model: 'tiny',
    block_size: 16,
    num_gpu_blocks: 32,
    max_model_len: 128,
    kv_transfer_config: {
      ...offloadConfig({ spec_name: 'TieringOffloadingSpec', secondary_tiers: [tier] }),
      kv_load_failure_policy: policy,
    },
  };
}

/** A tiny engine whose 16-block GPU pool is easily evicted, offloading with `extra` config. */
export function createSmallOffloadEngine(extra: Record<string, unknown>): Promise<AsyncEngine> {
  return AsyncEngine.create({
    model: 'tiny',
    block_size: 16,
    num_gpu_blocks: 16,
    max_model_len: 128,
    kv_transfer_config: offloadConfig(extra),
  });
}

/** The engine and KV cache config of a conformance context, as its engines build them. */
function contextConfigs(ctx: ConformanceContext): {
  engineConfig: EngineConfig;
  kvCacheConfig: KVCacheConfig;
} {
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
  return { engineConfig, kvCacheConfig };
}

/** The run layout (file names) of a conformance context's engines with `extra` config. */
export function contextRunLayout(ctx: ConformanceContext, extra: Record<string, unknown>): RunLayout {
  const { engineConfig, kvCacheConfig } = contextConfigs(ctx);
  const config = parseOffloadingConfig({ cpu_bytes_to_use: 16 * MiB, ...extra }, engineConfig);
  return runLayoutFor(engineConfig, kvCacheConfig, config.blocksPerChunk);
}

/** The tier keys of one chunk of a prompt, computed the way the engine does. */
export function chunkKeys(
  ctx: ConformanceContext,
  extra: Record<string, unknown>,
  prompt: number[],
  chunk: number,
): string[] {
  const { engineConfig, kvCacheConfig } = contextConfigs(ctx);
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

export const PROMPTS = [0, 1, 2, 3].map((s) =>
  Array.from({ length: 64 }, (_, i) => (i * (13 + s * 2) + 53 + s) % 256),
);

export interface Run {
  tokens: number[];
  last: RequestOutputDelta;
}

export async function run(engine: AsyncEngine, prompt: number[], id: string): Promise<Run> {
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
export function plainTokens(model: ConformanceModel, prompt: number[]): Promise<number[]> {
  const key = `${model}:${prompt.join(',')}`;
  let out = plainCache.get(key);
  if (!out) {
    out = computePlainTokens(model, prompt);
    plainCache.set(key, out);
  }
  return out;
}

/**
 * One plain engine per model serves every reference, one prompt at a time and without a
 * prefix cache, so each prompt is computed from scratch as on a fresh engine. An idle engine
 * holds nothing that keeps the process alive, so it is left to the process's exit.
 */
const plainEngines = new Map<ConformanceModel, Promise<AsyncEngine>>();
let plainQueue: Promise<unknown> = Promise.resolve();
let plainRuns = 0;

function computePlainTokens(model: ConformanceModel, prompt: number[]): Promise<number[]> {
  let engine = plainEngines.get(model);
  if (!engine) {
    engine = AsyncEngine.create({
      model,
      block_size: 16,
      num_gpu_blocks: 64,
      max_model_len: 128,
      enable_prefix_caching: false,
    });
    plainEngines.set(model, engine);
  }
  const ready = engine;
  const out = plainQueue.then(async () => (await run(await ready, prompt, `plain-${plainRuns++}`)).tokens);
  plainQueue = out.catch(() => undefined);
  return out;
}

/** The engine config of `tiny` (block size 16) as the tier tests build it. */
export function tinyEngineConfig(model = 'tiny'): EngineConfig {
  return buildEngineConfig({ model, block_size: 16, num_gpu_blocks: 32, max_model_len: 128 });
}

/** The KV cache config of an engine config from tinyEngineConfig. */
export function tinyKvCacheConfig(engineConfig: EngineConfig, hybrid = false): KVCacheConfig {
  return buildKVCacheConfig({
    hfConfig: resolveModelInfo(engineConfig.model.model).hfConfig,
    blockSize: engineConfig.cache.blockSize,
    numBlocks: 32,
    hybridEnabled: hybrid,
    maxModelLen: 128,
  });
}

/** The run layout of `tiny` with one-block chunks: file names for standalone FsTier tests. */
export function tinyRunLayout(): RunLayout {
  const engineConfig = tinyEngineConfig();
  return runLayoutFor(engineConfig, tinyKvCacheConfig(engineConfig), 1);
}

/** After a secondary tier went down under a running engine: failed operations and the outage were counted. */
export async function assertTierOutageCounted(engine: AsyncEngine): Promise<void> {
  await engine.waitIdle();
  const stats = engine.stats().kvConnectorStats ?? {};
  assert.ok(
    Number(stats['offload_lookup_tier_errors']) + Number(stats['offload_tier_errors']) > 0,
    JSON.stringify(stats),
  );
  assert.ok(Number(stats['offload_tier_outages']) >= 1, JSON.stringify(stats));
}

/** The outage was warned about once per tier client (scheduler and worker each hold one), naming `where`. */
export function assertOneOutageWarning(records: readonly LogRecord[], where: string): void {
  const warnings = records.filter(
    (r) => r.level === 'warn' && r.message.includes(where) && r.message.includes('unavailable'),
  );
  assert.ok(
    warnings.length >= 1 && warnings.length <= 2,
    `one warning per tier client and outage, got ${warnings.length}`,
  );
}
