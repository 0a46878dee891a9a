import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Worker } from 'node:worker_threads';
import { attentionLayerName, getModelPreset } from '../../src/config/model-presets.ts';
import type { KVCacheDtype } from '../../src/config/types.ts';
import { KVError } from '../../src/errors/index.ts';
import {
  buildKVCacheConfig,
  createPagedKVMemory,
  f16BitsToF32,
  f32ToF16Bits,
  pagedKVMemoryFromBuffers,
} from '../../src/kv/index.ts';

const hybrid = getModelPreset('tiny-hybrid')!.config;
const L = attentionLayerName;

function memory(dtype: KVCacheDtype) {
  return createPagedKVMemory(
    buildKVCacheConfig({ hfConfig: hybrid, blockSize: 16, dtype, numBlocks: 200, maxModelLen: 512 }),
    dtype,
  );
}

test('layout [block][K,V][token][head][dim]; writes land at the computed byte offsets', () => {
  const mem = memory('float32');
  const n = 2 * 32; // heads × dim
  const k = Float32Array.from({ length: n }, (_, i) => i + 0.5);
  const v = Float32Array.from({ length: n }, (_, i) => -i);
  const slot = 7 * 16 + 3; // block 7, token 3
  mem.writeTokenKV(L(2), slot, k, v);
  const t = mem.tensors[mem.tensorIndexOfLayer(L(2))]!;
  const f = new Float32Array(t.buffer);
  const kAt = 7 * (2 * 16 * n) + 3 * n;
  assert.deepEqual(f.subarray(kAt, kAt + n), k);
  assert.deepEqual(f.subarray(kAt + 16 * n, kAt + 17 * n), v);
  assert.equal(mem.tensorIndexOfLayer(L(2)), 1);
  assert.equal(mem.groupOfLayer(L(2)), 1);
  const kOut = new Float32Array(n);
  const vOut = new Float32Array(n);
  mem.readKV(L(2), [slot], kOut, vOut);
  assert.deepEqual([kOut, vOut], [k, v]);
  assert.equal(mem.float32View(L(2)).buffer, t.buffer);
  const range = mem.blockRange(1, 7, 3);
  assert.equal(range.byteOffset, 7 * t.blockBytes);
  assert.equal(range.byteLength, 3 * t.blockBytes);
  assert.throws(() => mem.blockRange(1, 199, 2), KVError);
  assert.throws(() => mem.writeTokenKV('nope', 0, k, v), KVError);
});

test('16-bit dtypes convert on write and read (float16, bfloat16)', () => {
  for (const dtype of ['float16', 'bfloat16'] as const) {
    const mem = memory(dtype);
    const n = 64;
    const k = Float32Array.from({ length: n }, (_, i) => i / 3);
    const v = Float32Array.from({ length: n }, (_, i) => 1000 - i * 7.25);
    mem.writeTokenKV(L(0), 16, k, v);
    const kOut = new Float32Array(n);
    const vOut = new Float32Array(n);
    mem.readKV(L(0), [16], kOut, vOut);
    for (let i = 0; i < n; i++) {
      const tol = dtype === 'float16' ? 2 ** -10 : 2 ** -7;
      assert.ok(Math.abs(kOut[i]! - k[i]!) <= Math.abs(k[i]!) * tol, `${dtype} k[${i}]`);
      assert.ok(Math.abs(vOut[i]! - v[i]!) <= Math.abs(v[i]!) * tol, `${dtype} v[${i}]`);
    }
    if (dtype === 'float16') {
      const words = new Uint16Array(mem.tensors[0]!.buffer, mem.blockRange(0, 1).byteOffset, 1);
      assert.equal(words[0], f32ToF16Bits(0));
      assert.equal(f16BitsToF32(f32ToF16Bits(k[3]!)), kOut[3]);
    }
    assert.throws(() => mem.float32View(L(0)), KVError);
  }
});

test('a worker thread rebuilt from the SharedArrayBuffers sees and writes the same memory', async () => {
  const mem = memory('float32');
  mem.writeTokenKV(L(4), 40, new Float32Array(64).fill(3), new Float32Array(64).fill(4));
  const code = `
    const { parentPort, workerData } = require('node:worker_threads');
    const cfg = workerData.kvCacheConfig;
    const f = new Float32Array(workerData.buffers[0]);
    const n = 64, bs = 16, at = 2 * (2 * bs * n) + 8 * n;
    const seen = f[at];
    f[at + bs * n] = 42; // V of slot 40
    parentPort.postMessage({ seen, numBlocks: cfg.numBlocks });`;
  const worker = new Worker(code, { eval: true, workerData: mem.toTransfer() });
  const reply = await new Promise<{ seen: number; numBlocks: number }>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  await worker.terminate();
  assert.deepEqual(reply, { seen: 3, numBlocks: 200 });
  const again = pagedKVMemoryFromBuffers(mem.toTransfer());
  const kOut = new Float32Array(64);
  const vOut = new Float32Array(64);
  again.readKV(L(4), [40], kOut, vOut);
  assert.equal(vOut[0], 42);
  assert.throws(
    () =>
      pagedKVMemoryFromBuffers({
        ...mem.toTransfer(),
        buffers: [new SharedArrayBuffer(8), new SharedArrayBuffer(8)],
      }),
    (e: unknown) => e instanceof KVError && e.code === 'KV_BUFFER_MISMATCH',
  );
});
