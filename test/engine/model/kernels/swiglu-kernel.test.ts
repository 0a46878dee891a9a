import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WasmRuntime } from '../../../../src/engine/model/kernels/wasm-matmul.ts';
import { SeededRandom } from '../../../../src/engine/model/prng.ts';

test('WASM SIMD SwiGLU equals gate · sigmoid(gate) · up, extreme gates and odd lengths included', () => {
  const rng = new SeededRandom(7);
  const rt = new WasmRuntime();
  for (const n of [1, 3, 4, 5, 64, 771]) {
    const gate = Float32Array.from({ length: n }, () => rng.nextGaussian() * 6);
    gate.set([100, -100, 0, 87.5, -87.5, 1e-8].slice(0, n));
    const up = Float32Array.from({ length: n }, () => rng.nextGaussian());
    const g = rt.upload(gate);
    const u = rt.upload(up);
    const out = rt.alloc(n);
    rt.swiglu(g, u, out, n);
    const got = rt.f32.subarray(out, out + n);
    for (let i = 0; i < n; i++) {
      const x = gate[i] as number;
      const want = (x / (1 + Math.exp(-x))) * (up[i] as number);
      const err = Math.abs((got[i] as number) - want);
      assert.ok(Number.isFinite(got[i] as number), `n=${n} i=${i} not finite`);
      assert.ok(err <= 1e-5 * Math.max(1, Math.abs(want)), `n=${n} i=${i}: ${got[i]} vs ${want}`);
    }
  }
});
