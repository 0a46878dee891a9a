/**
 * The step-time models as functions of the batch a step ran: llm-d-inference-sim's
 * calculators (formulas, load factor, jitter clamp, whole-millisecond quantization, cached
 * tokens free, KV transfer on the P/D decode side) and the roofline (inside the reference
 * ranges of llm-d-inference-sim's latency-profiles page at batch 1, growing with batch and context).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { buildEmulationConfig, type SimLatency } from '../../../src/config/emulation-config.ts';
import { resolveTargetModel } from '../../../src/config/target-deployment.ts';
import { RooflineModel, totalParams } from '../../../src/engine/timing/roofline.ts';
import { loadFactor, randomNormMs, SimLatencyModel } from '../../../src/engine/timing/sim-latency.ts';
import { type ScheduledSeq, type StepBatch, scheduledSeq } from '../../../src/engine/timing/step-batch.ts';

const seq = scheduledSeq;
const prefill = (n = 256, over: Partial<ScheduledSeq> = {}): ScheduledSeq =>
  seq({ numNewTokens: n, firstChunk: true, firstToken: true, ...over });
const decode = (context = 256): ScheduledSeq => seq({ contextBefore: context, decode: true });
const batch = (seqs: ScheduledSeq[], maxNumSeqs = 16): StepBatch => ({ seqs, maxNumSeqs });

function sim(options: Record<string, string>): SimLatency {
  const config = buildEmulationConfig(options);
  assert.ok(config);
  return config.sim;
}

test('constant: TTFT on the step that samples the first token, ITL on decode steps', () => {
  const m = new SimLatencyModel(
    'constant',
    sim({ 'time-to-first-token': '100ms', 'inter-token-latency': '12ms' }),
  );
  assert.equal(m.stepMs(batch([prefill()])), 100);
  assert.equal(m.stepMs(batch([decode()])), 12);
  // A chunk that does not complete the prompt costs nothing under constant TTFT.
  assert.equal(m.stepMs(batch([prefill(128, { firstToken: false })])), 0);
  // Prefill and decode in one step: the step lasts as long as its slowest request.
  assert.equal(m.stepMs(batch([prefill(), decode()])), 100);
});

test('per-token: overhead + uncached tokens × per-token; cached tokens are not charged', () => {
  const p = sim({
    'prefill-overhead': '30ms',
    'prefill-time-per-token': '250us',
    'inter-token-latency': '12ms',
  });
  const m = new SimLatencyModel('per-token', p);
  assert.equal(m.stepMs(batch([prefill(256)])), 94);
  // 192 of the 256 prompt tokens were a prefix-cache hit: the scheduler computes 64.
  assert.equal(m.stepMs(batch([prefill(64, { contextBefore: 192, numCachedPromptTokens: 192 })])), 46);
  // Chunked: the overhead is paid once, by the first chunk.
  assert.equal(m.stepMs(batch([prefill(128, { firstToken: false })])), 62);
  assert.equal(m.stepMs(batch([seq({ numNewTokens: 128, contextBefore: 128, firstToken: true })])), 32);
});

test('P/D decode side: the KV transfer time replaces the prefill, from the whole prompt, unscaled by load', () => {
  const remote = (n = 1): ScheduledSeq =>
    prefill(n, { contextBefore: 255, numCachedPromptTokens: 255, remotePrefill: true });
  const c = new SimLatencyModel(
    'constant',
    sim({
      'time-to-first-token': '100ms',
      'kv-cache-transfer-latency': '2ms',
      'time-factor-under-load': '3',
    }),
  );
  assert.equal(c.stepMs(batch([remote()])), 2);
  const many = Array.from({ length: 16 }, () => remote());
  assert.equal(c.stepMs(batch(many)), 2);
  const p = new SimLatencyModel('per-token', sim({ 'kv-cache-transfer-time-per-token': '20us' }));
  assert.equal(p.stepMs(batch([remote()])), 5); // 256 × 20us = 5.12ms → whole ms
  // The sim quantizes to whole milliseconds: 256 × 3us = 768us is 0.
  const small = new SimLatencyModel('per-token', sim({ 'kv-cache-transfer-time-per-token': '3us' }));
  assert.equal(small.stepMs(batch([remote()])), 0);
});

test('legacy "" calculator: constant form when a TTFT is set, per-token otherwise, chosen per phase', () => {
  const a = new SimLatencyModel('', sim({ 'time-to-first-token': '40ms', 'prefill-overhead': '5ms' }));
  assert.equal(a.stepMs(batch([prefill()])), 40);
  const b = new SimLatencyModel('', sim({ 'prefill-overhead': '5ms', 'prefill-time-per-token': '1ms' }));
  assert.equal(b.stepMs(batch([prefill(10)])), 15);
  const kv = new SimLatencyModel('', sim({ 'kv-cache-transfer-time-per-token': '1ms' }));
  assert.equal(kv.stepMs(batch([prefill(1, { remotePrefill: true })])), 256);
});

test('time-factor-under-load: linear from 1 at one request to the factor at max-num-seqs', () => {
  assert.equal(loadFactor(3, 1, 16), 1);
  assert.equal(loadFactor(3, 16, 16), 3);
  assert.equal(loadFactor(3, 5, 1), 1);
  const m = new SimLatencyModel(
    'constant',
    sim({ 'inter-token-latency': '10ms', 'time-factor-under-load': '3' }),
  );
  assert.equal(m.stepMs(batch([decode()], 16)), 10);
  assert.equal(
    m.stepMs(
      batch(
        Array.from({ length: 16 }, () => decode()),
        16,
      ),
    ),
    30,
  );
  assert.equal(
    m.stepMs(
      batch(
        Array.from({ length: 6 }, () => decode()),
        11,
      ),
    ),
    20,
  );
});

test('jitter: normal around the mean, clamped to ±70%, whole milliseconds, seeded', () => {
  let i = 0;
  const extremes = [10, -10, 0.5];
  const normal = (): number => extremes[i++ % extremes.length] as number;
  assert.equal(randomNormMs(100e6, 20e6, normal), 170);
  assert.equal(randomNormMs(100e6, 20e6, normal), 30);
  assert.equal(randomNormMs(100e6, 20e6, normal), 110);
  assert.equal(randomNormMs(12.9e6, 0.9e6, normal), 12); // std-dev under 1ms is no jitter
  const p = sim({ 'inter-token-latency': '12ms', 'inter-token-latency-std-dev': '2ms' });
  const draw = (seed: number): number[] => {
    const m = new SimLatencyModel('constant', p, seed);
    return Array.from({ length: 400 }, () => m.stepMs(batch([decode()])));
  };
  const samples = draw(7);
  assert.deepEqual(draw(7), samples);
  assert.notDeepEqual(draw(8), samples);
  const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
  // Whole-ms truncation of N(12, 2) has mean 11.5.
  assert.ok(mean > 11 && mean < 12, `mean ${mean}`);
  assert.ok(Math.min(...samples) >= 3 && Math.max(...samples) <= 20);
});

/** llm-d-inference-sim's latency-profiles page: 256-token TTFT and batch-1 ITL ranges (ms). */
const REFERENCE: Array<[string, string, number, [number, number], [number, number]]> = [
  ['llama-3.1-8b', 'h100', 1, [60, 120], [10, 15]],
  ['llama-3.1-8b', 'a100', 1, [100, 180], [15, 25]],
  ['llama-3.1-8b', 'l40s', 1, [180, 280], [25, 35]],
  ['llama-3.1-8b', 'mi300x', 1, [50, 100], [12, 18]],
  ['mistral-7b', 'h100', 1, [60, 120], [10, 15]],
  ['qwen3-32b', 'h100', 2, [160, 280], [20, 30]],
  ['qwen3-32b', 'a100', 2, [280, 450], [30, 45]],
  ['qwen3-32b', 'mi300x', 2, [130, 230], [25, 35]],
  ['llama-3.1-70b', 'h100', 8, [150, 250], [18, 28]],
  ['llama-3.1-70b', 'h100', 4, [250, 400], [25, 40]],
  ['llama-3.1-70b', 'a100', 8, [250, 400], [28, 45]],
  ['llama-3.1-70b', 'a100', 4, [400, 700], [40, 60]],
  ['llama-3.1-70b', 'mi300x', 8, [120, 215], [22, 32]],
  ['llama-3.1-70b', 'mi300x', 4, [200, 330], [30, 45]],
];

test('roofline built-ins: batch-1 TTFT (256 tokens) and ITL inside the reference ranges', () => {
  for (const [model, accelerator, tp, [t0, t1], [i0, i1]] of REFERENCE) {
    const m = RooflineModel.fromTarget({ model, accelerator, tensorParallelSize: tp });
    const ttft = m.stepMs(batch([prefill(256)]));
    const itl = m.stepMs(batch([decode(256)]));
    const row = `${model} on ${tp}×${accelerator}: TTFT ${ttft.toFixed(1)}, ITL ${itl.toFixed(1)}`;
    assert.ok(ttft >= t0 && ttft <= t1, row);
    assert.ok(itl >= i0 && itl <= i1, row);
  }
});

test('roofline: ITL grows with batch and with context, as the bandwidth model says', () => {
  const m = RooflineModel.fromTarget({ model: 'llama-3.1-8b', accelerator: 'h100', tensorParallelSize: 1 });
  const at = (b: number, ctx: number): number =>
    m.stepMs(
      batch(
        Array.from({ length: b }, () => decode(ctx)),
        256,
      ),
    );
  let last = 0;
  for (const b of [1, 8, 32, 128]) {
    const itl = at(b, 2048);
    assert.ok(itl > last, `batch ${b}: ${itl} after ${last}`);
    last = itl;
  }
  assert.ok(at(32, 8192) > at(32, 1024));
  // Bandwidth: 32 sequences × 7168 more tokens × 128 KiB at 70% of 3.35 TB/s.
  const extra = ((32 * 7168 * 131072) / (3350e9 * 0.7)) * 1e3;
  assert.ok(Math.abs(at(32, 8192) - at(32, 1024) - extra) < 0.01 * extra);
  // Chunked prefill: the second chunk attends to the first, so it costs more.
  const first = m.stepMs(batch([prefill(2048, { firstToken: false })]));
  const second = m.stepMs(batch([seq({ numNewTokens: 2048, contextBefore: 2048, firstToken: true })]));
  assert.ok(second > first - 0.75 * 32);
});

test('roofline: a config.json gives the same shape as the built-in of that model', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvc-target-'));
  writeFileSync(
    join(dir, 'config.json'),
    JSON.stringify({
      model_type: 'llama',
      num_hidden_layers: 32,
      hidden_size: 4096,
      num_attention_heads: 32,
      num_key_value_heads: 8,
      intermediate_size: 14336,
      vocab_size: 128256,
      tie_word_embeddings: false,
    }),
  );
  const fromFile = resolveTargetModel(dir);
  const builtin = resolveTargetModel('llama-3.1-8b');
  assert.deepEqual({ ...fromFile, name: '' }, { ...builtin, name: '' });
  assert.ok(Math.abs(totalParams(builtin) - 8.03e9) < 0.01e9);
  assert.throws(() => resolveTargetModel('llama-9'), /target-model/);
});
