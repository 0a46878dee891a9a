/**
 * Real KV at the target's size (`--mode random --target-model ...`): the KV blocks take the
 * target model's geometry (divided by --kv-bytes-scale) in BF16, a weightless forward writes
 * content determined by (token, position, layer), and real connectors move those bytes — a
 * NixlConnector P/D pair (transfer checksums verified) and the CPU offload tier — with the
 * tokens of one plain emulating engine.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildEmulationConfig } from '../../src/config/emulation-config.ts';
import { buildEngineConfig } from '../../src/config/engine-config.ts';
import type { KVTransferParams } from '../../src/connector/types.ts';
import type { RequestOutputDelta } from '../../src/engine/api.ts';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { Engine } from '../../src/engine/engine.ts';
import { fillSyntheticRow } from '../../src/engine/model/synthetic-model.ts';
import { LocalExecutor } from '../../src/engine/runner/local-executor.ts';
import { samplingParams } from '../../src/engine/sampling-params.ts';
import { bytesPerBlock } from '../../src/kv/kv-cache-config.ts';
import { createServer } from '../../src/server/index.ts';
import { parseExposition, sampleValue } from '../server/helpers/prom-text.ts';

const TARGET = { mode: 'random', 'target-model': 'llama-3.1-8b', 'kv-bytes-scale': '16' };
/** Llama-3.1-8B: 2 × 32 layers × 8 KV heads × 128 × 2 bytes = 128 KiB per token, / 16. */
const BYTES_PER_TOKEN = (128 * 1024) / 16;
const PROMPTS = [0, 1, 2].map((p) =>
  Array.from({ length: 40 + 17 * p }, (_, i) => 5 + ((i * 13 + p * 7) % 90)),
);

async function emulating(
  kvTransferConfig: Record<string, unknown> | null,
  numBlocks = 64,
  extra: Record<string, unknown> = {},
): Promise<AsyncEngine> {
  const config = buildEngineConfig({
    model: 'tiny',
    num_gpu_blocks: numBlocks,
    max_model_len: 256,
    ...(kvTransferConfig ? { kv_transfer_config: kvTransferConfig } : {}),
  });
  config.emulation = buildEmulationConfig({ ...TARGET, ...extra }, config.model.seed);
  return new AsyncEngine(await Engine.create(config));
}

/**
 * The bytes of a request's full prompt blocks in `engine`'s KV memory, every layer: block ids
 * are read at its steps, the bytes right after it finished (before another request can reuse
 * the blocks).
 */
function promptKv(engine: AsyncEngine, reqId: string, promptLen: number): () => Buffer {
  const executor = engine.engine.executor;
  assert.ok(executor instanceof LocalExecutor, 'the emulating engine runs its worker in process');
  let ids: number[] = [];
  const execute = executor.execute.bind(executor);
  executor.execute = (input) => {
    const now = engine.engine.scheduler.core.kv.getBlockIds(reqId)[0] ?? [];
    if (now.length > 0) ids = now;
    return execute(input);
  };
  return () => {
    executor.execute = execute;
    const full = ids.slice(0, Math.floor((promptLen - 1) / 16));
    assert.ok(full.length > 0, `${reqId}: its blocks were seen`);
    const { kv } = executor.runner;
    return Buffer.concat(
      kv.tensors.flatMap((t) => full.map((id) => Buffer.from(kv.blockRange(t.index, id, 1)))),
    );
  };
}

async function run(
  engine: AsyncEngine,
  id: string,
  prompt: number[],
  maxTokens: number,
  kvTransferParams: KVTransferParams | null = null,
): Promise<{ tokens: number[]; last: RequestOutputDelta }> {
  const deltas: RequestOutputDelta[] = [];
  const sampling = samplingParams({ maxTokens, temperature: 0, ignoreEos: true });
  for await (const d of engine.generate({
    requestId: id,
    promptTokenIds: prompt,
    sampling,
    kvTransferParams,
  })) {
    deltas.push(d);
  }
  const last = deltas.at(-1);
  assert.ok(last?.finished);
  assert.equal(last.error, undefined, JSON.stringify(last.error));
  return { tokens: deltas.flatMap((d) => d.newTokenIds), last };
}

test("the KV cache takes the target's geometry in BF16; content is a function of (token, position, layer)", async () => {
  const engine = await emulating(null);
  try {
    const kv = engine.engine.kvCacheConfig;
    assert.equal(
      kv.groups.reduce((n, g) => n + g.layerNames.length, 0),
      32,
    );
    assert.equal(bytesPerBlock(kv), 16 * BYTES_PER_TOKEN);
    assert.equal(engine.config.cache.cacheDtype, 'bfloat16');
  } finally {
    await engine.shutdown();
  }
  const a = new Uint16Array(8);
  const b = new Uint16Array(8);
  fillSyntheticRow(a, 0, 8, 42, 7, 3, 0);
  fillSyntheticRow(b, 0, 8, 42, 7, 3, 0);
  assert.deepEqual(a, b);
  for (const [t, p, l, h] of [
    [43, 7, 3, 0],
    [42, 8, 3, 0],
    [42, 7, 4, 0],
    [42, 7, 3, 1],
  ] as const) {
    fillSyntheticRow(b, 0, 8, t, p, l, h);
    assert.notDeepEqual(a, b, `(${t}, ${p}, ${l}, ${h})`);
  }
});

test("NixlConnector P/D moves the target's KV bytes, checksummed, with a plain engine's tokens", async () => {
  const plain = await emulating(null);
  const expected: number[][] = [];
  const expectedKv: Buffer[] = [];
  try {
    for (const [i, prompt] of PROMPTS.entries()) {
      const kv = promptKv(plain, `plain-${i}`, prompt.length);
      expected.push((await run(plain, `plain-${i}`, prompt, 8)).tokens);
      expectedKv.push(kv());
    }
  } finally {
    await plain.shutdown();
  }
  const nixl = (role: string, engineId: string) => ({
    kv_connector: 'NixlConnector',
    kv_role: role,
    engine_id: engineId,
    kv_connector_extra_config: { backends: ['TCP'], side_channel_port: 0 },
  });
  const p = await emulating(nixl('kv_producer', 'emu-prefill'));
  const d = await emulating(nixl('kv_consumer', 'emu-decode'));
  try {
    for (const [i, prompt] of PROMPTS.entries()) {
      const pOut = await run(p, `req-${i}`, prompt, 1, { do_remote_decode: true });
      const params = pOut.last.kvTransferParams;
      assert.equal(params?.['do_remote_prefill'], true);
      const kv = promptKv(d, `req-${i}`, prompt.length);
      const dOut = await run(d, `req-${i}`, prompt, 8, params ?? null);
      assert.deepEqual(dOut.tokens, expected[i], `prompt ${i}`);
      // Random-mode tokens do not read the KV: the KV D loaded is compared byte for byte with
      // what the plain engine computed for the same prompt.
      const got = kv();
      assert.equal(got.length, Math.floor((prompt.length - 1) / 16) * 16 * BYTES_PER_TOKEN);
      assert.ok(got.equals(expectedKv[i] as Buffer), `prompt ${i}: D's KV differs from the plain engine's`);
      assert.ok(
        got.some((byte) => byte !== 0),
        'the blocks hold written KV',
      );
      assert.ok(dOut.last.metrics.numExternalTokens > 0);
      assert.ok(dOut.last.metrics.numLocalComputedTokens <= 1);
    }
    await d.waitIdle();
    await p.waitIdle();
    const stats = d.stats().kvConnectorStats;
    assert.ok(stats, 'NIXL stats are reported');
    const moved = (stats['bytes_transferred'] as number[]).reduce((a, b) => a + b, 0);
    // Every full prompt block travelled at the target's size (checksums are verified on receipt).
    const fullBlocks = PROMPTS.reduce((n, prompt) => n + Math.floor((prompt.length - 1) / 16), 0);
    assert.ok(moved >= fullBlocks * 16 * BYTES_PER_TOKEN, `moved ${moved} bytes`);
    assert.equal(moved % (16 * BYTES_PER_TOKEN), 0);
  } finally {
    await p.shutdown();
    await d.shutdown();
  }
});

test('--kv-link: the decode server waits for the emulated link to carry the prompt KV', async () => {
  const nixl = (role: string, engineId: string) => ({
    kv_connector: 'NixlConnector',
    kv_role: role,
    engine_id: engineId,
    kv_connector_extra_config: { backends: ['TCP'], side_channel_port: 0 },
  });
  const p = await emulating(nixl('kv_producer', 'link-prefill'));
  // 5 MB/s with 100 ms setup: the 4 full blocks of prompt 2 (4 × 128 KiB here) take ~205 ms.
  const d = await emulating(nixl('kv_consumer', 'link-decode'), 64, { 'kv-link': '0.005,100ms' });
  try {
    // A first request pays the handshake, so the measured one pays only the transfer.
    const warm = await run(p, 'l0', PROMPTS[0] as number[], 1, { do_remote_decode: true });
    await run(d, 'l0', PROMPTS[0] as number[], 1, warm.last.kvTransferParams ?? null);
    const prompt = PROMPTS[2] as number[];
    const pOut = await run(p, 'l1', prompt, 1, { do_remote_decode: true });
    const started = performance.now();
    const dOut = await run(d, 'l1', prompt, 2, pOut.last.kvTransferParams ?? null);
    const elapsed = performance.now() - started;
    const blocks = Math.floor((prompt.length - 1) / 16);
    const linkMs = 100 + (blocks * 16 * BYTES_PER_TOKEN) / 0.005e6;
    assert.ok(elapsed >= linkMs, `D answered after ${elapsed} ms, the link needs ${linkMs} ms`);
    assert.ok((dOut.last.metrics.ttftMs ?? 0) >= linkMs - 1, `ttft ${dOut.last.metrics.ttftMs}`);
    // The link's counts in D's /metrics: every transfer D posted (the bytes NIXL moved), held.
    const server = createServer({ engine: d });
    try {
      const { url } = await server.start('127.0.0.1', 0);
      const exp = parseExposition(await (await fetch(`${url}/metrics`)).text());
      const value = (name: string): number => sampleValue(exp, `kvconnect:kv_link_${name}_total`);
      const transfers = value('transfers');
      const bytes = value('bytes');
      assert.ok(transfers >= 2, `transfers ${transfers}`);
      assert.equal(transfers, sampleValue(exp, 'vllm:nixl_bytes_transferred_count'));
      assert.equal(bytes, sampleValue(exp, 'vllm:nixl_bytes_transferred_sum'));
      assert.ok(bytes >= Math.floor((prompt.length - 1) / 16) * 16 * BYTES_PER_TOKEN, `bytes ${bytes}`);
      assert.ok(
        Math.abs(value('modelled_seconds') - (transfers * 0.1 + bytes / 0.005e9)) < 1e-6,
        `modelled ${value('modelled_seconds')}`,
      );
      // 5 MB/s is far slower than loopback TCP: the measured transfer finished early and was
      // held (the warm-up's, with its connection setup, may take longer on a loaded machine).
      const heldTransfers = value('held_transfers');
      assert.ok(heldTransfers >= 1 && heldTransfers <= transfers, `held ${heldTransfers} of ${transfers}`);
      const held = value('held_seconds');
      assert.ok(held > 0 && held <= value('modelled_seconds'), `held ${held}`);
    } finally {
      await server.close();
    }
  } finally {
    await p.shutdown();
    await d.shutdown();
  }
});

test('the CPU offload tier stores and loads the target-size KV; a reload gives the same tokens', async () => {
  const engine = await emulating(
    {
      kv_connector: 'OffloadingConnector',
      kv_role: 'kv_both',
      kv_connector_extra_config: { cpu_bytes_to_use: 64 << 20 },
    },
    64,
  );
  try {
    const prompt = PROMPTS[2] as number[];
    const first = await run(engine, 'o1', prompt, 6);
    await engine.waitIdle();
    assert.ok(await engine.resetPrefixCache());
    const second = await run(engine, 'o2', prompt, 6);
    assert.deepEqual(second.tokens, first.tokens);
    assert.ok(
      second.last.metrics.numExternalTokens >= 16,
      `external ${second.last.metrics.numExternalTokens}`,
    );
  } finally {
    await engine.shutdown();
  }
});
