import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { WasmRuntime } from '../../../../src/engine/model/kernels/wasm-matmul.ts';
import { SeededRandom } from '../../../../src/engine/model/prng.ts';
import { nativeAddon } from '../../../../src/util/native-addon.ts';
import { forwardDigests } from './fixtures/forward-digest.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const run = promisify(execFile);

/** SwiGLU of seeded rows (values up to ±120, so both clamps of the exponent are hit) on `rt`. */
function swigluBits(rt: WasmRuntime, rows: number, inter: number): Uint32Array {
  const rng = new SeededRandom(rows * 1000 + inter);
  const gateUp = rt.upload(
    Float32Array.from({ length: rows * 2 * inter }, (_, i) => rng.nextGaussian() * (i % 7 === 0 ? 40 : 3)),
  );
  const out = rt.alloc(rows * inter);
  rt.swigluRows(gateUp, out, rows, inter);
  return new Uint32Array(rt.f32.slice(out, out + rows * inter).buffer);
}

describe('native forward kernels (native/kvops.c: attention, SwiGLU, RMSNorm)', () => {
  it('SwiGLU: the native kernel gives the bits of the WebAssembly one, on any thread count', () => {
    for (const [rows, inter] of [
      [1, 4],
      [3, 12],
      [5, 768],
      [300, 772],
    ] as const) {
      const wasm = swigluBits(new WasmRuntime(1 << 22, false), rows, inter);
      for (const threads of [1, 2, 3]) {
        const rt = new WasmRuntime(1 << 22);
        rt.threads = threads;
        assert.deepEqual(swigluBits(rt, rows, inter), wasm, `${rows}×${inter} on ${threads} threads`);
      }
    }
  });

  it('whole forwards (prefill split across threads, chunk, decode; full and sliding-window attention): the same logits bits on 1, 2 and 3 threads and without the addon', async () => {
    if (process.env['KVCONNECT_EXPECT_NATIVE'] === '1') assert.ok(new WasmRuntime().nativeOps);
    const inProcess = await forwardDigests([1, 2, 3]);
    assert.equal(inProcess['2'], inProcess['1']);
    assert.equal(inProcess['3'], inProcess['1']);
    const { stdout } = await run(
      process.execPath,
      ['--import', 'tsx', path.join(here, 'fixtures', 'forward-digest.ts')],
      { env: { ...process.env, KVCONNECT_DISABLE_NATIVE_MATMUL: '1' }, timeout: 120_000 },
    );
    const withoutNative = JSON.parse(stdout.trim().split('\n').at(-1) as string) as Record<string, string>;
    assert.deepEqual(withoutNative, { 1: inProcess['1'] });
  });

  it('reject operands outside the memory or the KV tensor instead of reading past them', (t) => {
    const fn = (name: string) => nativeAddon?.[name] as ((...args: unknown[]) => void) | undefined;
    const decode = fn('attentionDecode');
    const rmsnorm = fn('rmsnorm');
    if (decode === undefined || rmsnorm === undefined) {
      t.skip('the native addon has no forward kernels here (see the second test for when that is an error)');
      return;
    }
    const rt = new WasmRuntime(1 << 16);
    const mem = rt.memory.buffer;
    const floats = mem.byteLength / 4;
    const kv = new Float32Array(2 * 16 * 64); // one block of 16 tokens, K and V rows of 64
    // A block id past the KV tensor, then a query row past the memory.
    assert.throws(
      () => decode(mem, kv, Int32Array.of(1), 16, 0, 256, 4096, 0, 1, 3, 8, 2, 32, 0, 1),
      RangeError,
    );
    assert.throws(
      () => decode(mem, kv, Int32Array.of(0), 16, floats - 10, 256, 4096, 0, 1, 3, 8, 2, 32, 0, 1),
      RangeError,
    );
    decode(mem, kv, Int32Array.of(0), 16, 0, 256, 4096, 0, 1, 3, 8, 2, 32, 0, 1);
    const weight = new Float32Array(64);
    assert.throws(() => rmsnorm(mem, weight, floats - 10, 0, 0, 1, 64, 1, 1e-6), RangeError);
    assert.throws(
      () => rmsnorm(mem, weight, 0, 0, 0, 1, 128, 1, 1e-6),
      RangeError,
      'weight shorter than dim',
    );
    assert.throws(() => rmsnorm(mem, new Float64Array(64), 0, 0, 0, 1, 64, 1, 1e-6), TypeError);
    assert.throws(() => rmsnorm(mem, weight, -1, 0, 0, 1, 64, 1, 1e-6), TypeError);
  });
});
