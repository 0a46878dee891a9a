import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  attentionRef,
  matmulRef,
  rmsnormRef,
  ropeRef,
  softmaxRef,
} from '../../../../src/engine/model/kernels/reference.ts';
import { assembleMatmulModule } from '../../../../src/engine/model/kernels/wasm-assembler.ts';
import { WasmRuntime } from '../../../../src/engine/model/kernels/wasm-matmul.ts';
import { SeededRandom } from '../../../../src/engine/model/prng.ts';
import { ropeInvFreq } from '../../../../src/engine/model/rope.ts';

function random(n: number, rng: SeededRandom): Float32Array {
  return Float32Array.from({ length: n }, () => rng.nextGaussian());
}

test('WASM SIMD matmul equals the reference on random shapes, odd sizes included', () => {
  const rng = new SeededRandom(42);
  const rt = new WasmRuntime();
  const shapes: [number, number, number][] = [
    [1, 1, 1],
    [1, 3, 2],
    [2, 5, 7],
    [3, 17, 9],
    [4, 16, 16],
    [5, 131, 33],
    [7, 129, 1],
    [8, 272, 256],
    [13, 300, 77],
  ];
  for (let i = 0; i < 12; i++)
    shapes.push([1 + (rng.nextUint32() % 20), 1 + (rng.nextUint32() % 200), 1 + (rng.nextUint32() % 90)]);
  for (const [m, n, k] of shapes) {
    const a = random(m * k, rng);
    const b = random(k * n, rng);
    const mark = rt.mark();
    const ao = rt.upload(a);
    const bo = rt.upload(b);
    const co = rt.alloc(m * n);
    rt.matmul(m, n, k, ao, k, bo, n, co, n);
    const ref = matmulRef(a, b, m, n, k);
    for (let i = 0; i < m * n; i++) {
      assert.ok(Math.abs(rt.f32[co + i]! - ref[i]!) <= 1e-4 * Math.sqrt(k), `${m}x${n}x${k} at ${i}`);
    }
    rt.release(mark);
  }
});

test('kernels compute in the grown memory after alloc grows it (the runtime caches its buffer)', () => {
  const rng = new SeededRandom(3);
  const rt = new WasmRuntime(1 << 16);
  const check = (m: number, n: number, k: number): void => {
    const a = random(m * k, rng);
    const b = random(k * n, rng);
    const ao = rt.upload(a);
    const bo = rt.upload(b);
    const co = rt.alloc(m * n);
    rt.matmul(m, n, k, ao, k, bo, n, co, n);
    const ref = matmulRef(a, b, m, n, k);
    for (let i = 0; i < m * n; i++) assert.ok(Math.abs(rt.f32[co + i]! - ref[i]!) <= 1e-4 * Math.sqrt(k));
    const weight = random(n, rng);
    const out = rt.alloc(m * n);
    if (rt.nativeOps) rt.rmsnorm(weight, 1e-5, co, 0, out, m, n);
    else return;
    const norm = rmsnormRef(Float32Array.from(rt.f32.subarray(co, co + m * n)), weight, m, n, 1e-5);
    for (let i = 0; i < m * n; i++) assert.ok(Math.abs(rt.f32[out + i]! - norm[i]!) <= 1e-5);
  };
  check(3, 8, 5);
  const before = rt.memory.buffer.byteLength;
  rt.alloc(1 << 18); // 1 MiB of floats: the memory grows
  assert.ok(rt.memory.buffer.byteLength > before);
  check(3, 8, 5);
  assert.equal(rt.f32.buffer, rt.memory.buffer);
});

test('matmul on strided sub-matrices (leading dimensions larger than the width)', () => {
  const rng = new SeededRandom(1);
  const rt = new WasmRuntime();
  const [m, n, k, lda, ldb, ldc] = [6, 10, 5, 9, 23, 14];
  const a = random(m * lda, rng);
  const b = random(k * ldb, rng);
  const ao = rt.upload(a);
  const bo = rt.upload(b);
  const co = rt.alloc(m * ldc);
  rt.f32.fill(99, co, co + m * ldc);
  rt.matmul(m, n, k, ao, lda, bo + 3, ldb, co, ldc);
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < ldc; j++) {
      const got = rt.f32[co + i * ldc + j]!;
      if (j >= n) {
        assert.equal(got, 99, 'wrote outside the output columns');
        continue;
      }
      let s = 0;
      for (let p = 0; p < k; p++) s += a[i * lda + p]! * b[p * ldb + 3 + j]!;
      assert.ok(Math.abs(got - s) < 1e-4);
    }
  }
});

test('the emitted module is valid WebAssembly that wabt can read back', async () => {
  const bytes = assembleMatmulModule();
  const wabt = await (await import('wabt')).default();
  const mod = wabt.readWasm(bytes, { readDebugNames: false, simd: true });
  mod.validate();
  const text = mod.toText({});
  for (const name of ['mm1', 'mm2', 'mm3', 'mm4']) assert.ok(text.includes(`"${name}"`));
  assert.ok(text.includes('f32x4.mul') && text.includes('f32x4.splat'));
  mod.destroy();
});

test('reference ops: softmax, rmsnorm, rope and attention behave as defined', () => {
  const p = softmaxRef(Float32Array.from([1, 2, 3, 1000]));
  assert.ok(Math.abs(p.reduce((s, v) => s + v, 0) - 1) < 1e-6);
  assert.ok(p[3]! > 0.999);
  const y = rmsnormRef(Float32Array.from([3, 4]), Float32Array.from([1, 2]), 1, 2, 0);
  const r = Math.sqrt(12.5);
  assert.ok(Math.abs(y[0]! - 3 / r) < 1e-6 && Math.abs(y[1]! - 8 / r) < 1e-6);
  const v = Float32Array.from([1, 2, 3, 4]);
  const invFreq = ropeInvFreq(4, 10000, { ropeType: 'default' });
  ropeRef(v, 0, invFreq, 0);
  assert.deepEqual(v, Float32Array.from([1, 2, 3, 4]));
  ropeRef(v, 0, invFreq, 5);
  const norm = Math.hypot(v[0]!, v[2]!);
  assert.ok(Math.abs(norm - Math.hypot(1, 3)) < 1e-5, 'rotation keeps the pair norm');
  const keys = Float32Array.from([1, 0, 0, 1]);
  const values = Float32Array.from([10, 0, 0, 20]);
  const out = attentionRef(Float32Array.from([0, 0]), keys, values, 2, 0, 1);
  assert.deepEqual([...out], [5, 10]);
  assert.deepEqual([...attentionRef(Float32Array.from([0, 0]), keys, values, 2, 1, 1)], [0, 20]);
});

test('WASM SIMD softmax equals the reference at any length and offset, and touches nothing else', () => {
  const rng = new SeededRandom(5);
  const rt = new WasmRuntime();
  for (const n of [1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 64, 100, 513]) {
    for (const shift of [0, 1, 2, 3]) {
      const mark = rt.mark();
      const base = rt.alloc(n + 8);
      const row = base + shift;
      const x = Float32Array.from({ length: n }, () => 8 * rng.nextGaussian());
      const mem = rt.f32;
      mem.fill(-7, base, base + n + 8);
      mem.set(x, row);
      rt.softmax(row, n);
      const ref = softmaxRef(x);
      let sum = 0;
      for (let i = 0; i < n; i++) {
        const got = rt.f32[row + i]!;
        sum += got;
        assert.ok(
          Math.abs(got - ref[i]!) <= 1e-6 + 2e-6 * ref[i]!,
          `n=${n} shift=${shift} at ${i}: ${got} vs ${ref[i]}`,
        );
      }
      assert.ok(Math.abs(sum - 1) < 1e-5, `n=${n}: probabilities sum to ${sum}`);
      for (let i = base; i < row; i++) assert.equal(rt.f32[i], -7, 'before the row');
      for (let i = row + n; i < base + n + 8; i++) assert.equal(rt.f32[i], -7, 'after the row');
      rt.release(mark);
    }
  }
  // Very negative scores underflow to 0 (clamped exp), the maximum still gets ~1.
  const row = rt.upload(Float32Array.from([0, -200, -1000, -90, -88]));
  rt.softmax(row, 5);
  assert.ok(Math.abs(rt.f32[row]! - 1) < 1e-6);
  for (let i = 1; i < 5; i++) assert.ok(rt.f32[row + i]! < 1e-30);
});
