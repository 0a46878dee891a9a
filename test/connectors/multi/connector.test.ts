import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { KVConnectorFactory } from '../../../src/connector/factory.ts';
import { type MultiConnector, pythonSetRepr } from '../../../src/connectors/multi/index.ts';
import { AsyncEngine } from '../../../src/engine/async-engine.ts';
import { samplingParams } from '../../../src/engine/llm.ts';
import { damageExampleEntry, exampleFolder } from '../example/helpers.ts';
import { runConnectorConformance } from '../helpers/conformance.ts';
import {
  blocksOf,
  connectorPair,
  request,
  schedulerOutput,
  workerStep,
} from '../helpers/connector-harness.ts';
import { scriptLog } from './fixtures/scripted-connector.ts';

const SCRIPTED = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures', 'scripted-connector.ts');
let nameCounter = 0;

function scripted(extra: Record<string, unknown>, hma = false): Record<string, unknown> {
  return {
    kv_connector: hma ? 'ScriptedHMAConnector' : 'ScriptedConnector',
    kv_connector_module_path: SCRIPTED,
    kv_role: 'kv_both',
    kv_connector_extra_config: extra,
  };
}

function multi(children: Record<string, unknown>[]): Record<string, unknown> {
  return {
    kv_connector: 'MultiConnector',
    kv_role: 'kv_both',
    kv_connector_extra_config: { connectors: children },
  };
}

const example = (dir: string) => ({
  kv_connector: 'ExampleConnector',
  kv_role: 'kv_both',
  kv_connector_extra_config: { shared_storage_path: dir },
});

async function multiPair(children: Record<string, unknown>[], hybrid = false) {
  const pair = await connectorPair(hybrid ? 'tiny-hybrid' : 'tiny', multi(children), { hybrid });
  await (pair.scheduler as MultiConnector).whenReady();
  await (pair.worker as MultiConnector).whenReady();
  return pair;
}

function uniqueName(tag: string): string {
  return `${tag}-${nameCounter++}`;
}

describe('MultiConnector', () => {
  test('first child with a hit loads; every other child gets the real blocks with 0', async () => {
    const names = [uniqueName('a'), uniqueName('b'), uniqueName('c')];
    const { scheduler } = await multiPair([
      scripted({ name: names[0], match: 0 }),
      scripted({ name: names[1], match: 10 }),
      scripted({ name: names[2], match: 20 }),
    ]);
    const req = request('r1', [1, 2, 3]);
    assert.deepEqual(scheduler.getNumNewMatchedTokens(req, 0), { count: 10, loadAsync: false });
    scheduler.updateStateAfterAlloc(req, blocksOf([[4, 5]]), 10);
    assert.deepEqual(scriptLog(`${names[0]}:scheduler`).allocs, [
      { reqId: 'r1', blockIds: [[4, 5]], numExternalTokens: 0 },
    ]);
    assert.deepEqual(scriptLog(`${names[1]}:scheduler`).allocs, [
      { reqId: 'r1', blockIds: [[4, 5]], numExternalTokens: 10 },
    ]);
    assert.deepEqual(scriptLog(`${names[2]}:scheduler`).allocs, [
      { reqId: 'r1', blockIds: [[4, 5]], numExternalTokens: 0 },
    ]);
  });

  test('a child still looking up (null) makes the answer null', async () => {
    const { scheduler } = await multiPair([
      scripted({ name: uniqueName('h'), match: 5 }),
      scripted({ name: uniqueName('n'), match: null }),
    ]);
    assert.deepEqual(scheduler.getNumNewMatchedTokens(request('r', [1, 2]), 0), {
      count: null,
      loadAsync: false,
    });
  });

  test('kv_transfer_params merge; a clash is the exact vLLM error (keys sorted, Python set repr)', async () => {
    const ok = await multiPair([
      scripted({ name: uniqueName('p'), params: { a: 1 } }),
      scripted({ name: uniqueName('q'), params: { b: 2 } }),
    ]);
    assert.deepEqual(ok.scheduler.requestFinished(request('r', [1]), [[1]]), {
      delayFree: false,
      kvTransferParams: { a: 1, b: 2 },
    });
    const clash = await multiPair([
      scripted({ name: uniqueName('p'), params: { b: 1, a: 2 } }),
      scripted({ name: uniqueName('q'), params: { c: 0, a: 3, b: 4 } }),
    ]);
    assert.throws(() => clash.scheduler.requestFinished(request('r', [1]), [[1]]), {
      message: "Key clash in kv_transfer_params from multiple connectors: {'a', 'b'}",
      code: 'KV_MULTI_CONNECTOR_KEY_CLASH',
    });
    assert.equal(pythonSetRepr(["it's", 'x']), `{"it's", 'x'}`);
  });

  test('two children saving asynchronously: the request is reported finished once, after both', async () => {
    const pair = await multiPair([
      scripted({ name: uniqueName('s'), async_save: true }),
      scripted({ name: uniqueName('t'), async_save: true, send_delay_steps: 1 }),
      scripted({ name: uniqueName('u') }),
    ]);
    const finished = pair.scheduler.requestFinished(request('r', [1, 2]), [[3]]);
    assert.equal(finished.delayFree, true);
    const step = async (finishedIds: string[]) => {
      const out = schedulerOutput([], finishedIds);
      out.kvConnectorMetadata = pair.scheduler.buildConnectorMeta(out);
      return { meta: out.kvConnectorMetadata, result: await workerStep(pair, out) };
    };
    const first = await step(['r']);
    assert.deepEqual(first.meta.extraAsyncSaves, { r: 1 });
    assert.equal(first.result.finished.sending, null, 'one child finished, the other has not');
    const second = await step([]);
    assert.equal(second.meta.extraAsyncSaves, null);
    assert.deepEqual(second.result.finished.sending, ['r']);
    const third = await step([]);
    assert.equal(third.result.finished.sending, null, 'reported once');
  });

  test('stats are keyed by child class name, children of one class aggregated', async () => {
    const { worker } = await multiPair([
      scripted({ name: uniqueName('x'), stats: { n: 1, list: ['a'] } }),
      scripted({ name: uniqueName('y'), stats: { n: 2, list: ['b'] } }),
      scripted({ name: uniqueName('z'), stats: { n: 5 } }, true),
      scripted({ name: uniqueName('w') }),
    ]);
    assert.deepEqual(worker.getKvConnectorStats(), {
      ScriptedConnector: { n: 3, list: ['a', 'b'] },
      ScriptedHMAConnector: { n: 5 },
    });
    const quiet = await multiPair([scripted({ name: uniqueName('q') })]);
    assert.equal(quiet.worker.getKvConnectorStats(), null);
  });

  test('capabilities: delivery = any, cross-layer = all, reset = none false, handshake = first, metadata per child', async () => {
    const a = uniqueName('a');
    const b = uniqueName('b');
    const pair = await multiPair([
      scripted({ name: a, kv_delivery: false, cross_layer: true, reset: null }),
      scripted({ name: b, kv_delivery: true, cross_layer: false, reset: true, handshake: { port: 1 } }),
    ]);
    assert.equal(pair.scheduler.requiresKvDelivery, true);
    assert.equal(pair.scheduler.preferCrossLayerBlocks, false);
    assert.equal(pair.scheduler.resetCache(), true);
    assert.deepEqual(pair.worker.getHandshakeMetadata(), { port: 1 });
    assert.equal(pair.scheduler.getFinishedCount(), null);
    const out = schedulerOutput([]);
    out.kvConnectorMetadata = pair.scheduler.buildConnectorMeta(out);
    await workerStep(pair, out);
    assert.deepEqual(scriptLog(`${a}:worker`).bound.at(-1), { from: a });
    assert.deepEqual(scriptLog(`${b}:worker`).bound.at(-1), { from: b });
    const failing = await multiPair([
      scripted({ name: uniqueName('f'), reset: false }),
      scripted({ name: uniqueName('g'), shutdown_error: 'boom' }),
    ]);
    assert.equal(failing.scheduler.resetCache(), false);
    const c = uniqueName('c');
    const d = uniqueName('d');
    const closing = await multiPair([
      scripted({ name: c, shutdown_error: 'first' }),
      scripted({ name: d, shutdown_error: 'last' }),
    ]);
    await assert.rejects(Promise.resolve(closing.worker.shutdown()), { message: 'last' });
    assert.equal(scriptLog(`${c}:worker`).shutdowns, 1);
    assert.equal(scriptLog(`${d}:worker`).shutdowns, 1);
  });

  test('HMA: effective only if every child supports it; mixed children keep one group', async () => {
    const hmaOnly = multi([{ kv_connector: 'DecodeBenchConnector', kv_role: 'kv_both' }, scripted({}, true)]);
    const mixed = multi([{ kv_connector: 'DecodeBenchConnector', kv_role: 'kv_both' }, example(os.tmpdir())]);
    const asConfig = async (c: Record<string, unknown>) =>
      (await connectorPair('tiny', c)).engineConfig.kvTransferConfig!;
    assert.equal(await KVConnectorFactory.supportsHMAConfig(await asConfig(hmaOnly)), true);
    assert.equal(await KVConnectorFactory.supportsHMAConfig(await asConfig(mixed)), false);
    assert.equal(await KVConnectorFactory.supportsHMAConfig(await asConfig(multi([]))), false);
    await assert.rejects(
      AsyncEngine.create({
        model: 'tiny-hybrid',
        disable_hybrid_kv_cache_manager: false,
        kv_transfer_config: mixed,
      }),
      {
        message:
          'Connector MultiConnector does not support HMA but HMA is enabled. Please set `--disable-hybrid-kv-cache-manager`.',
      },
    );
    const hybrid = await multiPair(
      [scripted({ name: uniqueName('h') }, true), scripted({ name: uniqueName('i') }, true)],
      true,
    );
    assert.equal((hybrid.scheduler as MultiConnector).allChildrenSupportHMA, true);
    const groups = hybrid.kvCacheConfig.groups.map((_, g) => [g + 1]);
    assert.equal(hybrid.scheduler.requestFinished(request('r', [1]), groups).delayFree, false);
    const single = await multiPair([
      scripted({ name: uniqueName('j') }),
      scripted({ name: uniqueName('k') }, true),
    ]);
    assert.throws(() => single.scheduler.requestFinished(request('r', [1]), [[1], [2]]), {
      message: 'HMA with multiple kv_cache_groups requires all sub-connectors to support HMA',
    });
  });

  test('two ExampleConnectors: both store every prompt; the first child with the entry loads it', async () => {
    const [d1, d2] = [0, 1].map(() => fs.mkdtempSync(path.join(os.tmpdir(), 'kvconnect-multi-')));
    const config = multi([example(d1 as string), example(d2 as string)]);
    const prompt = Array.from({ length: 40 }, (_, i) => (i * 5 + 1) % 256);
    const sampling = samplingParams({ maxTokens: 4, temperature: 0, ignoreEos: true });
    const runOnce = async () => {
      const engine = await AsyncEngine.create({
        model: 'tiny',
        num_gpu_blocks: 64,
        max_model_len: 256,
        kv_transfer_config: config,
      });
      try {
        const tokenIds: number[] = [];
        let metrics = null;
        for await (const d of engine.generate({ requestId: 'm', promptTokenIds: prompt, sampling })) {
          tokenIds.push(...d.newTokenIds);
          metrics = d.metrics;
        }
        return { tokenIds, external: metrics?.numExternalTokens, stats: engine.stats().kvConnectorStats };
      } finally {
        await engine.shutdown();
      }
    };
    try {
      const first = await runOnce();
      assert.equal(first.external, 0);
      assert.deepEqual(
        fs.readdirSync(d1 as string),
        fs.readdirSync(d2 as string),
        'both children stored the prompt',
      );
      assert.deepEqual(first.stats, {
        ExampleConnector: {
          num_loaded_blocks: 0,
          num_saved_blocks: 4,
          num_load_errors: 0,
          num_save_errors: 0,
        },
      });
      fs.rmSync(exampleFolder(d1 as string, 'tiny', prompt), { recursive: true });
      const second = await runOnce();
      assert.equal(second.external, 32, 'the second child had the entry');
      assert.deepEqual(second.tokenIds, first.tokenIds);
      assert.deepEqual(
        fs.readdirSync(d1 as string),
        fs.readdirSync(d2 as string),
        'the first child stored it again',
      );
    } finally {
      for (const d of [d1, d2]) fs.rmSync(d as string, { recursive: true, force: true });
    }
  });
});

runConnectorConformance({
  name: 'MultiConnector(ExampleConnector, ExampleConnector)',
  mode: 'storage',
  supportsHybrid: false,
  makeProducerConfig: (ctx) =>
    multi([example(path.join(ctx.dir, 'first')), example(path.join(ctx.dir, 'second'))]),
  makeConsumerConfig: (ctx) =>
    multi([example(path.join(ctx.dir, 'first')), example(path.join(ctx.dir, 'second'))]),
  corrupt: (ctx, target) => {
    for (const child of ['first', 'second']) {
      damageExampleEntry(
        exampleFolder(path.join(ctx.dir, child), ctx.model, target.promptTokenIds),
        target.kind,
      );
    }
  },
});
