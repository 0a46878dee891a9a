import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { samplingParams } from '../../src/engine/sampling-params.ts';

const CLIENTS = 8;
const ROUNDS = 8;

/**
 * Closed-loop clients that come back 1 or 3 ms after their answer (like HTTP clients whose
 * next request needs a round trip) should keep landing in one batch instead of splitting
 * into two cohorts of 4.
 */
test('requests of just-answered clients are batched together', async () => {
  const engine = await AsyncEngine.create({ model: 'tiny', num_gpu_blocks: 256, max_model_len: 128 });
  try {
    const stepSizes: number[] = [];
    const inner = engine.engine;
    const step = inner.step.bind(inner);
    inner.step = async () => {
      const out = await step();
      if (out.numScheduledTokens > 0) stepSizes.push(out.deltas.filter((d) => d.finished).length);
      return out;
    };
    const sampling = samplingParams({ maxTokens: 1, temperature: 0, ignoreEos: true });
    let next = 0;
    const client = async (c: number): Promise<void> => {
      for (let round = 0; round < ROUNDS; round++) {
        // Distinct 112-token prompts: no prefix-cache hits, and steps long enough that the
        // wait (a share of the last step, REFILL_WAIT_STEP_SHARE) covers a 3 ms return.
        const prompt = Array.from({ length: 112 }, (_, i) => 1 + ((next * 7 + i) % 200));
        for await (const _ of engine.generate({
          requestId: `r-${next++}`,
          promptTokenIds: prompt,
          sampling,
        })) {
          // drain
        }
        await sleep(c % 2 === 0 ? 1 : 3);
      }
    };
    await Promise.all(Array.from({ length: CLIENTS }, (_, c) => client(c)));
    assert.equal(
      stepSizes.reduce((a, b) => a + b, 0),
      CLIENTS * ROUNDS,
    );
    const full = stepSizes.filter((n) => n === CLIENTS).length;
    assert.ok(full >= ROUNDS - 2, `full batches ${full} of ${stepSizes.length}: ${stepSizes.join(' ')}`);
  } finally {
    await engine.shutdown();
  }
});
