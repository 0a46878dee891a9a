/**
 * An engine emulating a deployment: the engine loop holds each step for the step-time model's
 * duration (checked through the clock's totals and lower bounds, never tight upper bounds on
 * this shared machine), `--speedup` runs emulated time faster with metrics in emulated time,
 * and `--mode random|echo` produces deterministic tokens without a model.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildEmulationConfig } from '../../src/config/emulation-config.ts';
import { buildEngineConfig } from '../../src/config/engine-config.ts';
import type { RequestOutputDelta } from '../../src/engine/api.ts';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { Engine } from '../../src/engine/engine.ts';
import { samplingParams } from '../../src/engine/sampling-params.ts';
import { KVError } from '../../src/errors/kv-error.ts';

async function emulatedEngine(emulation: Record<string, unknown>, engine: Record<string, unknown> = {}) {
  const config = buildEngineConfig({ model: 'tiny', num_gpu_blocks: 128, max_model_len: 512, ...engine });
  config.emulation = buildEmulationConfig(emulation, config.model.seed);
  return new AsyncEngine(await Engine.create(config));
}

async function run(engine: AsyncEngine, id: string, prompt: string, maxTokens: number, ignoreEos = true) {
  const deltas: RequestOutputDelta[] = [];
  const sampling = samplingParams({ maxTokens, temperature: 0, ignoreEos });
  for await (const d of engine.generate({ requestId: id, prompt, sampling })) deltas.push(d);
  const last = deltas.at(-1);
  assert.ok(last?.finished);
  return { tokens: deltas.flatMap((d) => d.newTokenIds), last };
}

test('--speedup: the modelled time is applied in emulated time, R times faster than the wall clock', async () => {
  const engine = await emulatedEngine({
    'latency-calculator': 'constant',
    'time-to-first-token': '200ms',
    'inter-token-latency': '50ms',
    mode: 'random',
    speedup: '40',
  });
  try {
    const started = performance.now();
    const { tokens, last } = await run(engine, 'a', 'one two three four', 10);
    const realMs = performance.now() - started;
    assert.equal(tokens.length, 10);
    // The loop held one 200 ms prefill step and nine 50 ms decode steps, no more, no less.
    assert.deepEqual(engine.engine.clock.stats(), { heldSteps: 10, heldMs: 650 });
    // Metrics are emulated time: never below the model.
    assert.ok((last.metrics.ttftMs ?? 0) >= 200, `ttft ${last.metrics.ttftMs}`);
    assert.ok((last.metrics.e2eMs ?? 0) >= 650, `e2e ${last.metrics.e2eMs}`);
    // 650 emulated ms at 40× is ~16 real ms; anything under half the unscaled time proves the speedup.
    assert.ok(realMs < 325, `real ${realMs} ms`);
  } finally {
    await engine.shutdown();
  }
});

test('speedup 1: the steps take the modelled wall-clock time at least', async () => {
  const engine = await emulatedEngine({
    'latency-calculator': 'per-token',
    'prefill-overhead': '20ms',
    'prefill-time-per-token': '1ms',
    'inter-token-latency': '10ms',
    mode: 'echo',
  });
  try {
    const prompt = 'a b c d e f g h';
    const n = engine.tokenizer.encode(prompt).length;
    const started = performance.now();
    const { last } = await run(engine, 'b', prompt, 4);
    const realMs = performance.now() - started;
    const modelled = 20 + n + 3 * 10;
    assert.deepEqual(engine.engine.clock.stats(), { heldSteps: 4, heldMs: modelled });
    assert.ok(realMs >= modelled - 1, `real ${realMs} < ${modelled}`);
    assert.ok((last.metrics.e2eMs ?? 0) >= modelled - 1);
    assert.ok(realMs < modelled + 2000, `real ${realMs}`);
  } finally {
    await engine.shutdown();
  }
});

test('--mode echo returns the prompt; --mode random is deterministic per prompt and ends by the histogram', async () => {
  const echo = await emulatedEngine({ mode: 'echo' });
  try {
    const prompt = 'the quick brown fox';
    const ids = echo.tokenizer.encode(prompt);
    const { tokens } = await run(echo, 'e', prompt, ids.length + 5, false);
    assert.deepEqual(tokens.slice(0, ids.length), ids);
    assert.equal(echo.engine.clock.stats().heldSteps, 0, 'no latency options: no held steps');
  } finally {
    await echo.shutdown();
  }
  const random = await emulatedEngine({ mode: 'random' });
  try {
    const a = await run(random, 'r1', 'tell me a story', 60, false);
    const b = await run(random, 'r2', 'tell me a story', 60, false);
    assert.deepEqual(a.tokens, b.tokens);
    assert.ok(a.tokens.length >= 1 && a.tokens.length <= 60);
    const lengths = await Promise.all(
      Array.from({ length: 40 }, (_, i) => run(random, `h${i}`, `prompt number ${i}`, 60, false)),
    );
    const distinct = new Set(lengths.map((r) => r.tokens.length));
    assert.ok(distinct.size > 5, `lengths ${[...distinct]}`);
    const ignored = await run(random, 'r3', 'tell me a story', 60, true);
    assert.equal(ignored.tokens.length, 60);
  } finally {
    await random.shutdown();
  }
});

test('--mode random refuses a KV connector (it computes no KV)', async () => {
  await assert.rejects(
    emulatedEngine(
      { mode: 'random' },
      { kv_transfer_config: { kv_connector: 'NixlConnector', kv_role: 'kv_both' } },
    ),
    (e: unknown) => e instanceof KVError && e.field === 'mode',
  );
});

test('the engine tells the clock which held steps continue the previous one', async () => {
  const engine = await emulatedEngine({
    'latency-calculator': 'constant',
    'time-to-first-token': '2ms',
    'inter-token-latency': '1ms',
    mode: 'random',
    speedup: '1000',
  });
  try {
    const clock = engine.engine.clock;
    const calls: Array<[number, boolean]> = [];
    const hold = clock.holdStep.bind(clock);
    clock.holdStep = (startedAt, ms, continues = false) => {
      calls.push([ms, continues]);
      return hold(startedAt, ms, continues);
    };
    await run(engine, 'c1', 'one two three', 3);
    await run(engine, 'c2', 'four five six', 2);
    // Each request's prefill follows an idle engine; its decodes continue it.
    assert.deepEqual(calls, [
      [2, false],
      [1, true],
      [1, true],
      [2, false],
      [1, true],
    ]);
  } finally {
    await engine.shutdown();
  }
});
