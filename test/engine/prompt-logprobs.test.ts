/**
 * vLLM's prompt_logprobs: every prompt token after the first gets its logprob and rank, and
 * the top-k alternatives, from the distribution the model gives at the position before it.
 * Oracle: that distribution is also the one the first generated token of the shorter prompt
 * is sampled from, so its top logprobs must match.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { PositionLogprobs, RequestOutputDelta, SamplingParams } from '../../src/engine/api.ts';
import { Engine } from '../../src/engine/engine.ts';
import { samplingParams } from '../../src/engine/sampling-params.ts';

async function run(engine: Engine, id: string, prompt: number[], over: Partial<SamplingParams>) {
  engine.addRequest({
    requestId: id,
    promptTokenIds: prompt,
    sampling: samplingParams({ maxTokens: 1, temperature: 0, ...over }),
  });
  const deltas: RequestOutputDelta[] = [];
  while (engine.hasWork()) deltas.push(...(await engine.step()).deltas.filter((d) => d.requestId === id));
  return deltas;
}

const prompt = [
  1, 72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100, 33, 32, 84, 104, 101, 32, 113, 117, 105, 99, 107,
];

for (const chunk of [2048, 5]) {
  test(`prompt logprobs match the next-token distribution of each prefix (max_num_batched_tokens ${chunk})`, async () => {
    const engine = await Engine.create({
      model: 'tiny',
      num_gpu_blocks: 64,
      max_model_len: 128,
      max_num_batched_tokens: chunk,
    });
    try {
      // Warm the prefix cache: the scoring request must not read it.
      await run(engine, 'warm', prompt, {});
      const deltas = await run(engine, 'scored', prompt, { promptLogprobs: 3 });
      const withPrompt = deltas.filter((d) => d.promptLogprobs !== undefined);
      assert.equal(withPrompt.length, 1, 'prompt logprobs come once, with the first token');
      assert.ok(withPrompt[0]!.newTokenIds.length > 0);
      const lp = withPrompt[0]!.promptLogprobs!;
      assert.equal(lp.length, prompt.length);
      assert.equal(lp[0], null, 'nothing precedes the first prompt token');
      for (const k of [1, 2, 7, prompt.length - 1]) {
        const entry = lp[k] as PositionLogprobs;
        assert.equal(entry.tokenId, prompt[k]);
        const [ref] = await run(engine, `ref-${k}`, prompt.slice(0, k), { logprobs: 3 });
        const refTop = ref!.topLogprobs![0]!;
        assert.deepEqual(
          entry.top.map((t) => t.tokenId),
          refTop.map((t) => t.tokenId),
          `position ${k}`,
        );
        for (const [i, t] of entry.top.entries())
          assert.ok(Math.abs(t.logprob - refTop[i]!.logprob) < 1e-4, `position ${k} top ${i}`);
        const inTop = entry.top.findIndex((t) => t.tokenId === entry.tokenId);
        if (inTop >= 0) {
          assert.equal(entry.rank, inTop + 1);
          assert.ok(Math.abs(entry.logprob - entry.top[inTop]!.logprob) < 1e-6);
        } else assert.ok(entry.rank > 3 && entry.logprob <= entry.top[2]!.logprob);
      }
      const plain = await run(engine, 'plain', prompt, {});
      assert.ok(
        plain.every((d) => d.promptLogprobs === undefined),
        'none unless asked',
      );
    } finally {
      await engine.shutdown();
    }
  });
}
