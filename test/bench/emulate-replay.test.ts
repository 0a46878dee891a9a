/**
 * `npm run bench -- emulate` compares each batch-1 request with the durations the server
 * drew for it, by replaying the server's step-time model with the server's seed. Here an
 * emulating engine with llm-d-inference-sim's jitter records every duration it holds, and the
 * bench's replay must reproduce them exactly, request by request (no wall-clock timing: the
 * durations are the model's, read where the engine hands them to its clock).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Batch1Replay } from '../../bench/emulate.ts';
import { buildEmulationConfig } from '../../src/config/emulation-config.ts';
import { buildEngineConfig } from '../../src/config/engine-config.ts';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { Engine } from '../../src/engine/engine.ts';
import { samplingParams } from '../../src/engine/sampling-params.ts';

const PROMPT = 64;
const TOKENS = 6;

for (const calculator of ['constant', 'per-token'] as const) {
  test(`the bench's replay draws the ${calculator} calculator's jitter as the engine does`, async () => {
    // llm-d-inference-sim's 8b-h100-balanced profile: every duration jittered.
    const options = {
      'latency-calculator': calculator,
      'time-to-first-token': '100ms',
      'time-to-first-token-std-dev': '20ms',
      'prefill-overhead': '30ms',
      'prefill-time-per-token': '250us',
      'prefill-time-std-dev': '5ms',
      'inter-token-latency': '12ms',
      'inter-token-latency-std-dev': '2ms',
      mode: 'random',
      speedup: '1000',
    };
    const config = buildEngineConfig({ model: 'tiny', num_gpu_blocks: 64, max_model_len: 256, seed: 77 });
    config.emulation = buildEmulationConfig(options, config.model.seed);
    const engine = new AsyncEngine(await Engine.create(config));
    const held: number[] = [];
    const clock = engine.engine.clock;
    const hold = clock.holdStep.bind(clock);
    clock.holdStep = (startedAt, ms, continues) => {
      held.push(ms);
      return hold(startedAt, ms, continues);
    };
    const replay = new Batch1Replay(options, 77, PROMPT, TOKENS);
    try {
      for (let r = 0; r < 4; r++) {
        held.length = 0;
        const prompt = Array.from({ length: PROMPT }, (_, i) => 5 + ((i * 11 + r * 17) % 90));
        const sampling = samplingParams({ maxTokens: TOKENS, ignoreEos: true });
        for await (const _ of engine.generate({ requestId: `r${r}`, promptTokenIds: prompt, sampling }));
        assert.equal(held.length, TOKENS, 'one prefill step and a decode step per further token');
        const want = replay.next();
        assert.equal(held[0], want.ttft);
        const itl = held.slice(1).reduce((a, b) => a + b, 0) / (TOKENS - 1);
        assert.equal(itl, want.itl);
      }
      // The draws are jittered: not all ITLs equal (else this test could not tell orders apart).
      assert.ok(new Set(held.slice(1)).size > 1, `draws ${held}`);
    } finally {
      await engine.shutdown();
    }
  });
}
