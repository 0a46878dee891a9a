import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, test } from 'node:test';
import {
  alignToBlockSize,
  ExampleConnector,
  encodeKVFile,
  layerFileName,
  layoutTag,
  promptKey,
  readBlock,
  readKVFileHeader,
  storedTokenCount,
} from '../../../src/connectors/example/index.ts';
import { shapeMismatch } from '../../../src/connectors/example/kv-file.ts';
import { AsyncEngine } from '../../../src/engine/async-engine.ts';
import { runConnectorConformance } from '../helpers/conformance.ts';
import {
  blocksOf,
  connectorPair,
  patternBlock,
  request,
  schedulerOutput,
  workerStep,
} from '../helpers/connector-harness.ts';
import { damageExampleEntry, exampleFolder, exampleLayerFile } from './helpers.ts';

const exampleConfig = (dir: string) => ({
  kv_connector: 'ExampleConnector',
  kv_role: 'kv_both',
  kv_connector_extra_config: { shared_storage_path: dir },
});

runConnectorConformance({
  name: 'ExampleConnector',
  mode: 'storage',
  supportsHybrid: false,
  makeProducerConfig: (ctx) => exampleConfig(ctx.dir),
  makeConsumerConfig: (ctx) => exampleConfig(ctx.dir),
  corrupt: (ctx, target) =>
    damageExampleEntry(exampleFolder(ctx.dir, ctx.model, target.promptTokenIds), target.kind),
});

describe('ExampleConnector storage', () => {
  let dir = '';
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvconnect-example-'));
  });
  afterEach(() => {
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('lookup alignment is align_to_block_size(len(prompt) - 1), align(n) = floor((n - 1) / bs) * bs', () => {
    assert.equal(alignToBlockSize(17, 16), 16);
    assert.equal(alignToBlockSize(16, 16), 0);
    assert.equal(alignToBlockSize(0, 16), 0);
    const cases: [number, number][] = [
      [17, 0],
      [18, 16],
      [33, 16],
      [34, 32],
      [50, 48],
      [64, 48],
      [65, 48],
      [66, 64],
    ];
    for (const [len, stored] of cases) assert.equal(storedTokenCount(len, 16), stored, `prompt of ${len}`);
  });

  test('the folder key is md5 of int64 little-endian token bytes plus the layout (and salt)', () => {
    const tokens = [1, 2, 300, 65535];
    const bytes = Buffer.alloc(32);
    for (const [i, t] of tokens.entries()) bytes.writeBigInt64LE(BigInt(t), i * 8);
    const expected = createHash('md5').update(bytes).update('|layout:tiny/float32/16').digest('hex');
    assert.equal(promptKey(tokens, 'tiny/float32/16'), expected);
    assert.equal(layoutTag('tiny', 'float32', 16), 'tiny/float32/16');
    const salted = createHash('md5')
      .update(bytes)
      .update('|layout:tiny/float32/16')
      .update('|salt:s1')
      .digest('hex');
    assert.equal(promptKey(tokens, 'tiny/float32/16', 's1'), salted);
    assert.notEqual(promptKey(tokens, 'tiny-hybrid/float32/16'), expected);
    assert.equal(layerFileName('model.layers.3.self_attn.attn'), 'model.layers.3.self_attn.attn.kv');
  });

  test('a producer stores each layer in the prompt folder; a consumer loads the same bytes into other blocks', async () => {
    const config = {
      kv_connector: 'SharedStorageConnector',
      kv_role: 'kv_both',
      kv_connector_extra_config: { shared_storage_path: dir },
    };
    const prompt = Array.from({ length: 50 }, (_, i) => i + 1);
    const producer = await connectorPair('tiny', config);
    assert.equal(
      producer.scheduler.constructor.name,
      'ExampleConnector',
      'SharedStorageConnector is an alias',
    );
    const req = request('p', prompt);
    assert.deepEqual(producer.scheduler.getNumNewMatchedTokens(req, 0), { count: 0, loadAsync: false });
    producer.scheduler.updateStateAfterAlloc(req, blocksOf([[5, 6, 7, 8]]), 0);
    const out = schedulerOutput([
      { reqId: 'p', promptTokenIds: prompt, blockIds: [[5, 6, 7, 8]], numComputedTokens: 0, scheduled: 50 },
    ]);
    out.kvConnectorMetadata = producer.scheduler.buildConnectorMeta(out);
    const written = new Map<string, Uint8Array[]>();
    await workerStep(producer, out, (layer) => {
      written.set(
        layer,
        [5, 6, 7].map((id) => patternBlock(producer.memory, layer, id, layer.length).slice()),
      );
    });
    const folder = exampleFolder(dir, 'tiny', prompt);
    assert.deepEqual(
      fs.readdirSync(dir),
      [path.basename(folder)],
      'only the published folder remains, no staging folder',
    );
    assert.equal(fs.readdirSync(folder).length, 4, 'one file per layer');

    const consumer = await connectorPair('tiny', config);
    const req2 = request('c', prompt);
    assert.deepEqual(consumer.scheduler.getNumNewMatchedTokens(req2, 0), { count: 48, loadAsync: false });
    assert.deepEqual(
      consumer.scheduler.getNumNewMatchedTokens(req2, 16),
      { count: 32, loadAsync: false },
      'beyond the local hit',
    );
    consumer.scheduler.updateStateAfterAlloc(req2, blocksOf([[9, 10, 11, 12]]), 48);
    const out2 = schedulerOutput([
      {
        reqId: 'c',
        promptTokenIds: prompt,
        blockIds: [[9, 10, 11, 12]],
        numComputedTokens: 48,
        scheduled: 2,
      },
    ]);
    out2.kvConnectorMetadata = consumer.scheduler.buildConnectorMeta(out2);
    const { errors } = await workerStep(consumer, out2);
    assert.deepEqual(errors, []);
    for (const [layer, blocks] of written) {
      const tensor = consumer.memory.tensorIndexOfLayer(layer);
      blocks.forEach((bytes, i) => {
        assert.deepEqual(consumer.memory.blockRange(tensor, 9 + i, 1), bytes, `${layer} block ${i}`);
      });
    }
    assert.deepEqual(consumer.worker.getKvConnectorStats(), {
      num_loaded_blocks: 3,
      num_saved_blocks: 0,
      num_load_errors: 0,
      num_save_errors: 0,
    });
    consumer.scheduler.requestFinished(req2, [[9, 10, 11, 12]]);
    assert.equal((consumer.scheduler as unknown as { numTrackedRequests: number }).numTrackedRequests, 0);
  });

  test('a leftover staging folder is never trusted; a truncated layer file is a load error for exactly its lost blocks', async () => {
    const config = {
      kv_connector: 'ExampleConnector',
      kv_role: 'kv_both',
      kv_connector_extra_config: { shared_storage_path: dir },
    };
    const prompt = Array.from({ length: 66 }, (_, i) => 200 - i);
    const producer = await connectorPair('tiny', config);
    producer.scheduler.updateStateAfterAlloc(request('p', prompt), blocksOf([[1, 2, 3, 4, 5]]), 0);
    const out = schedulerOutput([
      {
        reqId: 'p',
        promptTokenIds: prompt,
        blockIds: [[1, 2, 3, 4, 5]],
        numComputedTokens: 0,
        scheduled: 66,
      },
    ]);
    out.kvConnectorMetadata = producer.scheduler.buildConnectorMeta(out);
    await workerStep(producer, out);
    const folder = exampleFolder(dir, 'tiny', prompt);

    // A crash before publishing leaves only a staging folder: the prompt is not found.
    fs.renameSync(folder, `${folder}.staging-999-deadbeef`);
    const consumer = await connectorPair('tiny', config);
    assert.deepEqual(consumer.scheduler.getNumNewMatchedTokens(request('c', prompt), 0), {
      count: 0,
      loadAsync: false,
    });
    fs.renameSync(`${folder}.staging-999-deadbeef`, folder);

    // A published file cut inside block 2 (of 4): blocks 2 and 3 fail, 0 and 1 load.
    damageTruncate(exampleLayerFile(folder, 1), 2);
    const req = request('c', prompt);
    assert.deepEqual(consumer.scheduler.getNumNewMatchedTokens(req, 0), { count: 64, loadAsync: false });
    consumer.scheduler.updateStateAfterAlloc(req, blocksOf([[11, 12, 13, 14, 15]]), 64);
    const out2 = schedulerOutput([
      {
        reqId: 'c',
        promptTokenIds: prompt,
        blockIds: [[11, 12, 13, 14, 15]],
        numComputedTokens: 64,
        scheduled: 2,
      },
    ]);
    out2.kvConnectorMetadata = consumer.scheduler.buildConnectorMeta(out2);
    const { errors } = await workerStep(consumer, out2);
    assert.deepEqual(
      errors.sort((a, b) => a - b),
      [13, 14],
    );
    assert.deepEqual(consumer.worker.getBlockIdsWithLoadErrors(), [], 'errors are drained once reported');
  });

  test('layer files reject a foreign header, a wrong shape and a flipped payload byte', () => {
    const shape = { dtype: 'float32' as const, blockSize: 2, numKvHeads: 1, headSize: 2, model: 'tiny' };
    const blocks = [new Uint8Array(32).fill(1), new Uint8Array(32).fill(2)];
    const file = encodeKVFile(shape, blocks);
    const header = readKVFileHeader(file);
    assert.ok(typeof header !== 'string');
    assert.equal(header.numTokens, 4);
    assert.deepEqual(new Uint8Array(readBlock(file, header, 1) ?? []), blocks[1]);
    assert.equal(shapeMismatch(header, shape), null);
    assert.equal(
      shapeMismatch(header, { ...shape, model: 'small' }),
      'model is tiny in the file, small here',
    );
    assert.equal(shapeMismatch(header, { ...shape, numKvHeads: 2 }), 'numKvHeads is 1 in the file, 2 here');
    const flipped = Buffer.from(file);
    flipped[header.payloadOffset + 40] = 9;
    assert.deepEqual(new Uint8Array(readBlock(flipped, header, 0) ?? []), blocks[0]);
    assert.equal(readBlock(flipped, header, 1), null);
    const badHeader = Buffer.from(file);
    badHeader[16] = 3;
    assert.equal(readKVFileHeader(badHeader), 'header checksum mismatch');
    assert.equal(
      readKVFileHeader(Buffer.from('not a kv file at all, really not one')),
      'bad magic (not a kvconnect KV file)',
    );
  });

  test('HMA forced on fails with the factory message', async () => {
    await assert.rejects(
      AsyncEngine.create({
        model: 'tiny-hybrid',
        disable_hybrid_kv_cache_manager: false,
        kv_transfer_config: {
          kv_connector: 'ExampleConnector',
          kv_role: 'kv_both',
          kv_connector_extra_config: { shared_storage_path: dir },
        },
      }),
      {
        message:
          'Connector ExampleConnector does not support HMA but HMA is enabled. Please set `--disable-hybrid-kv-cache-manager`.',
      },
    );
  });

  test('shared_storage_path defaults to the OS temp directory and must be a non-empty string', () => {
    assert.deepEqual(ExampleConnector.validateExtraConfig({}), { sharedStoragePath: os.tmpdir() });
    assert.throws(() => ExampleConnector.validateExtraConfig({ shared_storage_path: 3 }), {
      code: 'KV_CONFIG_INVALID',
    });
  });
});

function damageTruncate(file: string, blockIndex: number): void {
  const bytes = fs.readFileSync(file);
  const header = readKVFileHeader(bytes);
  if (typeof header === 'string') throw new Error(header);
  fs.writeFileSync(file, bytes.subarray(0, header.payloadOffset + blockIndex * header.blockBytes + 5));
}
