import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { matmulImplementation, WasmRuntime } from '../../../../src/engine/model/kernels/wasm-matmul.ts';
import { nativeAddon } from '../../../../src/util/native-addon.ts';
import { generateOnce } from '../../fixtures/generate-once.ts';
import { matmulDigest, WEIGHT_DTYPES, weightDigest } from './fixtures/matmul-digest.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const run = promisify(execFile);

/** Runs a fixture script in a fresh process with extra environment; returns its last stdout line. */
async function child(script: string, env: Record<string, string>): Promise<string> {
  const { stdout } = await run(process.execPath, ['--import', 'tsx', script], {
    env: { ...process.env, ...env },
    timeout: 60_000,
  });
  return stdout.trim().split('\n').at(-1) as string;
}

describe('native matmul (native/kvmatmul.c)', () => {
  it('is the engine kernel when the native build is expected (KVCONNECT_EXPECT_NATIVE=1)', () => {
    if (process.env['KVCONNECT_EXPECT_NATIVE'] === '1') {
      assert.ok(
        matmulImplementation === 'avx512' || matmulImplementation === 'avx2',
        `native matmul expected, got ${matmulImplementation}`,
      );
    }
    assert.equal(matmulImplementation === 'wasm-simd', typeof nativeAddon?.['matmulF32'] !== 'function');
  });

  it('gives bit-identical results to the WebAssembly kernel: AVX-512, AVX2 and WASM agree', async () => {
    const wasm = matmulDigest(false);
    assert.equal(matmulDigest(true), wasm, `in-process ${matmulImplementation} differs from wasm-simd`);
    const script = path.join(here, 'fixtures', 'matmul-digest.ts');
    const avx2 = JSON.parse(await child(script, { KVCONNECT_DISABLE_AVX512: '1' })) as Record<string, string>;
    const off = JSON.parse(await child(script, { KVCONNECT_DISABLE_NATIVE_MATMUL: '1' })) as Record<
      string,
      string
    >;
    assert.equal(off['kernel'], 'wasm-simd');
    assert.equal(off['digest'], wasm);
    if (matmulImplementation !== 'wasm-simd') assert.equal(avx2['kernel'], 'avx2');
    assert.equal(avx2['digest'], wasm);
    // Weights: float16/bfloat16 in the native kernels (AVX-512 and AVX2) give the bits the
    // WebAssembly kernel gives on the same values widened to float32.
    const weights = WEIGHT_DTYPES.map((d) => weightDigest(false, d));
    assert.deepEqual(
      WEIGHT_DTYPES.map((d) => weightDigest(true, d)),
      weights,
    );
    assert.deepEqual(off['weights'], weights);
    assert.deepEqual(avx2['weights'], weights);
  });

  it('gives the same bits on 1, 2 and 3 threads (the split never cuts the sum over k)', () => {
    const one = matmulDigest(true, 1);
    const poolSize = nativeAddon?.['matmulPoolSize'] as (() => number) | undefined;
    assert.equal(matmulDigest(true, 2), one);
    assert.equal(matmulDigest(true, 3), one);
    for (const dtype of WEIGHT_DTYPES) {
      const w1 = weightDigest(true, dtype, 1);
      assert.equal(weightDigest(true, dtype, 2), w1, dtype);
      assert.equal(weightDigest(true, dtype, 3), w1, dtype);
    }
    // The threaded runs really ran on the pool (two helpers for three threads).
    if (matmulImplementation !== 'wasm-simd') assert.ok((poolSize?.() ?? 0) >= 2);
  });

  it("does not wake the pool for a small model's batch-1 products, only for larger ones", async (t) => {
    if (matmulImplementation === 'wasm-simd') {
      t.skip('the native addon has no matmul here (see the first test for when that is an error)');
      return;
    }
    const out = JSON.parse(await child(path.join(here, 'fixtures', 'pool-wake.ts'), {})) as Record<
      string,
      number
    >;
    assert.deepEqual(out, { small: 0, large: 1 });
  });

  it('the engine generates the same tokens with and without it (greedy and seeded sampling)', async () => {
    const script = path.join(here, '..', '..', 'fixtures', 'generate-once.ts');
    const withoutNative = JSON.parse(
      await child(script, { KVCONNECT_DISABLE_NATIVE_MATMUL: '1' }),
    ) as number[][];
    assert.deepEqual(await generateOnce(), withoutNative);
    assert.equal(withoutNative[0]?.length, 8);
  });

  it('rejects operands that do not fit in the memory instead of reading past it', (t) => {
    const fn = nativeAddon?.['matmulF32'] as ((...args: unknown[]) => void) | undefined;
    if (fn === undefined) {
      t.skip('the native addon has no matmul here (see the first test for when that is an error)');
      return;
    }
    const rt = new WasmRuntime(1 << 16);
    const floats = rt.memory.buffer.byteLength / 4;
    const m = 4;
    const k = 8;
    const n = 16;
    assert.throws(() => fn(rt.memory.buffer, m, n, k, floats - 10, k, 0, n, 0, n), RangeError);
    assert.throws(() => fn(rt.memory.buffer, m, n, k, 0, k, floats - 10, n, 0, n), RangeError);
    assert.throws(() => fn(rt.memory.buffer, m, n, k, 0, k, 0, n, floats - 10, n), RangeError);
    assert.throws(
      () => fn(rt.memory.buffer, m, 6, k, 0, k, 0, n, 0, n),
      RangeError,
      'n4 must be a multiple of 4',
    );
    assert.throws(() => fn(rt.memory.buffer, m, n, k, -1, k, 0, n, 0, n), TypeError);
    assert.throws(() => fn(new Float32Array(4), m, n, k, 0, k, 0, n, 0, n), TypeError);
    fn(rt.memory.buffer, m, n, k, 0, k, 1024, n, 4096, n);
  });
});
