import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { DecodeBenchConnector } from '../../../src/connectors/decode-bench/index.ts';
import { AsyncEngine } from '../../../src/engine/async-engine.ts';
import { samplingParams } from '../../../src/engine/llm.ts';
import type { SharedPagedKVMemory } from '../../../src/kv/paged-memory.ts';
import {
  blocksOf,
  connectorPair,
  request,
  schedulerOutput,
  workerStep,
} from '../helpers/connector-harness.ts';

const CONFIG = { kv_connector: 'DecodeBenchConnector', kv_role: 'kv_consumer' };
const tokens = (n: number) => Array.from({ length: n }, (_, i) => (i * 11 + 3) % 256);

function floatsOf(memory: SharedPagedKVMemory, layer: string, blockId: number): Float32Array {
  const bytes = memory.blockRange(memory.tensorIndexOfLayer(layer), blockId, 1);
  return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
}

describe('DecodeBenchConnector', () => {
  test('reports all but the last token, never for one-token prompts', async () => {
    const { scheduler } = await connectorPair('tiny', CONFIG);
    assert.deepEqual(scheduler.getNumNewMatchedTokens(request('a', tokens(1)), 0), {
      count: 0,
      loadAsync: false,
    });
    assert.deepEqual(scheduler.getNumNewMatchedTokens(request('b', tokens(2)), 0), {
      count: 1,
      loadAsync: false,
    });
    assert.deepEqual(scheduler.getNumNewMatchedTokens(request('c', tokens(40)), 16), {
      count: 23,
      loadAsync: false,
    });
  });

  test('fills once per request: no second offer until the request finishes', async () => {
    const { scheduler } = await connectorPair('tiny', CONFIG);
    const req = request('r', tokens(40));
    assert.equal(scheduler.getNumNewMatchedTokens(req, 0).count, 39);
    assert.equal(scheduler.getNumNewMatchedTokens(req, 0).count, 39, 'the lookup itself has no side effect');
    scheduler.updateStateAfterAlloc(req, blocksOf([[1, 2, 3]]), 39);
    assert.equal(scheduler.getNumNewMatchedTokens(req, 0).count, 0);
    scheduler.requestFinished(req, [[1, 2, 3]]);
    assert.equal(scheduler.getNumNewMatchedTokens(req, 0).count, 39);
  });

  test('fills exactly the blocks of the external tokens (partial last block) with fill_mean', async () => {
    const pair = await connectorPair('tiny', CONFIG);
    const req = request('r', tokens(21));
    pair.scheduler.updateStateAfterAlloc(req, blocksOf([[4, 5]]), 20);
    const out = schedulerOutput([
      { reqId: 'r', promptTokenIds: tokens(21), blockIds: [[4, 5]], numComputedTokens: 20, scheduled: 1 },
    ]);
    out.kvConnectorMetadata = pair.scheduler.buildConnectorMeta(out);
    await workerStep(pair, out);
    for (const layer of pair.kvCacheConfig.groups[0]?.layerNames ?? []) {
      for (const id of [4, 5])
        assert.ok(
          floatsOf(pair.memory, layer, id).every((v) => v === Math.fround(0.015)),
          `${layer} block ${id}`,
        );
      assert.ok(
        floatsOf(pair.memory, layer, 6).every((v) => v === 0),
        'the next block is untouched',
      );
      assert.ok(
        floatsOf(pair.memory, layer, 3).every((v) => v === 0),
        'the previous block is untouched',
      );
    }
    assert.deepEqual(pair.worker.getKvConnectorStats(), { num_filled_blocks: 2 });
    const again = schedulerOutput([]);
    again.kvConnectorMetadata = pair.scheduler.buildConnectorMeta(again);
    assert.deepEqual(again.kvConnectorMetadata, { fills: [] }, 'a fill is shipped once');
  });

  test('supports HMA: fills every KV cache group; only blocks past the local hit', async () => {
    const pair = await connectorPair(
      'tiny-hybrid',
      { ...CONFIG, kv_connector_extra_config: { fill_mean: 0.5 } },
      { hybrid: true },
    );
    assert.equal(DecodeBenchConnector.supportsHMA, true);
    const groups = pair.kvCacheConfig.groups;
    assert.ok(groups.length >= 2, 'tiny-hybrid with HMA has several KV cache groups');
    const ids = groups.map((_, g) => [1 + 3 * g, 2 + 3 * g, 3 + 3 * g]);
    const req = request('r', tokens(40));
    // Local hit of 16 tokens: the first block of each group is cached and must stay as is.
    pair.scheduler.updateStateAfterAlloc(req, blocksOf(ids), 23);
    const out = schedulerOutput([
      { reqId: 'r', promptTokenIds: tokens(40), blockIds: ids, numComputedTokens: 39, scheduled: 1 },
    ]);
    out.kvConnectorMetadata = pair.scheduler.buildConnectorMeta(out);
    await workerStep(pair, out);
    groups.forEach((group, g) => {
      const [first, ...rest] = ids[g] as number[];
      for (const layer of group.layerNames) {
        assert.ok(
          floatsOf(pair.memory, layer, first as number).every((v) => v === 0),
          `${layer}: cached block kept`,
        );
        for (const id of rest)
          assert.ok(
            floatsOf(pair.memory, layer, id).every((v) => v === 0.5),
            `${layer} block ${id}`,
          );
      }
    });
  });

  test('fill_std > 0 draws seeded normal values; bad values are config errors', async () => {
    const extra = { fill_mean: 1, fill_std: 0.25 };
    const fill = async () => {
      const pair = await connectorPair('tiny', { ...CONFIG, kv_connector_extra_config: extra });
      pair.scheduler.updateStateAfterAlloc(request('r', tokens(17)), blocksOf([[2, 3]]), 16);
      const out = schedulerOutput([
        { reqId: 'r', promptTokenIds: tokens(17), blockIds: [[2, 3]], numComputedTokens: 16, scheduled: 1 },
      ]);
      out.kvConnectorMetadata = pair.scheduler.buildConnectorMeta(out);
      await workerStep(pair, out);
      return Array.from(floatsOf(pair.memory, 'model.layers.0.self_attn.attn', 2));
    };
    const a = await fill();
    const mean = a.reduce((s, v) => s + v, 0) / a.length;
    const std = Math.sqrt(a.reduce((s, v) => s + (v - mean) ** 2, 0) / a.length);
    assert.ok(Math.abs(mean - 1) < 0.03, `mean ${mean}`);
    assert.ok(Math.abs(std - 0.25) < 0.03, `std ${std}`);
    assert.deepEqual(await fill(), a, 'same seed, same values');
    assert.throws(() => DecodeBenchConnector.validateExtraConfig({ fill_std: -1 }), {
      code: 'KV_CONFIG_INVALID',
    });
    assert.deepEqual(DecodeBenchConnector.validateExtraConfig({}), { fillMean: 0.015, fillStd: 0 });
  });

  for (const [model, hma] of [
    ['tiny', null],
    ['tiny-hybrid', false],
  ] as const) {
    test(`engine (${model}): concurrent requests compute only their last prompt token and free every block`, async () => {
      const engine = await AsyncEngine.create({
        model,
        num_gpu_blocks: 64,
        max_model_len: 256,
        disable_hybrid_kv_cache_manager: hma,
        kv_transfer_config: CONFIG,
      });
      try {
        const sampling = samplingParams({ maxTokens: 4, temperature: 0, ignoreEos: true });
        const lengths = [1, 2, 17, 45];
        const outs = await Promise.all(
          lengths.map(async (n, i) => {
            let last = null;
            let count = 0;
            for await (const d of engine.generate({
              requestId: `d${i}`,
              promptTokenIds: tokens(n),
              sampling,
            })) {
              count += d.newTokenIds.length;
              last = d;
            }
            return { last, count };
          }),
        );
        outs.forEach(({ last, count }, i) => {
          const n = lengths[i] as number;
          assert.equal(count, 4);
          const m = last?.metrics;
          assert.equal((m?.numExternalTokens ?? 0) + (m?.numLocalCachedTokens ?? 0), n - 1, `prompt of ${n}`);
          if (n > 1) assert.ok((m?.numExternalTokens ?? 0) > 0, `prompt of ${n}: nothing filled`);
          assert.equal(last?.metrics.numLocalComputedTokens, 1, `prompt of ${n}`);
        });
        await engine.waitIdle();
        assert.equal(engine.stats().kvCacheUsage, 0);
        assert.equal(engine.engine.hma.enabled, true, 'a connector with HMA keeps the hybrid manager on');
      } finally {
        await engine.shutdown();
      }
    });
  }
});
