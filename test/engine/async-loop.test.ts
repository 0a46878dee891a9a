import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { RequestOutputDelta } from '../../src/engine/api.ts';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { samplingParams } from '../../src/engine/llm.ts';

function recordSteps(engine: AsyncEngine): number[] {
  const tokens: number[] = [];
  const step = engine.engine.step.bind(engine.engine);
  engine.engine.step = async () => {
    const result = await step();
    tokens.push(result.numScheduledTokens);
    return result;
  };
  return tokens;
}

async function drain(stream: AsyncIterable<RequestOutputDelta>): Promise<RequestOutputDelta[]> {
  const out: RequestOutputDelta[] = [];
  for await (const d of stream) out.push(d);
  return out;
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

test('requests submitted in the same tick share the first step', async () => {
  const engine = await AsyncEngine.create({ model: 'tiny', num_gpu_blocks: 64, max_model_len: 128 });
  try {
    const steps = recordSteps(engine);
    const sampling = samplingParams({ maxTokens: 1, temperature: 0 });
    const prompts = ['one', 'two two', 'three three three', 'four', 'five', 'six', 'seven', 'eight'];
    const promptTokens = prompts.reduce((n, p) => n + engine.tokenizer.encode(p).length, 0);
    const results = await Promise.all(
      prompts.map((prompt, i) => drain(engine.generate({ requestId: `r${i}`, prompt, sampling }))),
    );
    for (const deltas of results) assert.equal(deltas.at(-1)?.finished, true);
    assert.equal(steps[0], promptTokens, `first step computed ${steps[0]} of ${promptTokens} prompt tokens`);
  } finally {
    await engine.shutdown();
  }
});

test('a request added as the previous one finishes is served (no lost wake-up)', async () => {
  const engine = await AsyncEngine.create({ model: 'tiny', num_gpu_blocks: 64, max_model_len: 128 });
  try {
    const sampling = samplingParams({ maxTokens: 2, temperature: 0, ignoreEos: true });
    const chain = async (): Promise<number> => {
      let served = 0;
      for (let i = 0; i < 12; i++) {
        // The next request is added from inside the consumer of the final delta, i.e. while
        // the engine loop is ending.
        const deltas = await drain(engine.generate({ requestId: `c${i}`, prompt: `chain ${i}`, sampling }));
        if (deltas.at(-1)?.finished) served++;
      }
      return served;
    };
    assert.equal(await withTimeout(chain(), 10_000, 'the request chain'), 12);
    // Same race through abort(): abort, then immediately add the next request.
    const long = samplingParams({ maxTokens: 50, temperature: 0, ignoreEos: true });
    for (let i = 0; i < 4; i++) {
      const deltas: RequestOutputDelta[] = [];
      for await (const d of engine.generate({ requestId: `a${i}`, prompt: 'abort', sampling: long })) {
        deltas.push(d);
        if (deltas.length === 2) engine.abort(`a${i}`);
      }
      assert.equal(deltas.at(-1)?.finishReason, 'abort');
      const next = await withTimeout(
        drain(engine.generate({ requestId: `n${i}`, prompt: 'next', sampling })),
        10_000,
        'the request after an abort',
      );
      assert.equal(next.at(-1)?.finished, true);
    }
    await withTimeout(engine.waitIdle(), 5_000, 'waitIdle');
    assert.equal(engine.stats().kvCacheUsage, 0);
  } finally {
    await engine.shutdown();
  }
});
