/**
 * Engines driven by the P/D tests (NIXL, MoRIIO, their faults): the prompts, greedy sampling,
 * a plain engine's tokens to compare with, and the check that an engine gave all blocks back.
 */
import assert from 'node:assert/strict';
import { LLM } from '../../src/engine/llm.ts';

export const PROMPTS = [
  'The quick brown fox jumps over the lazy dog and keeps running far away from the hunters.',
  'A short one.',
  'Disaggregated prefill moves the KV cache of a long prompt from one engine to another engine directly.',
];
export const GREEDY = { maxTokens: 6, temperature: 0, ignoreEos: true };

/** The token ids one plain engine (no connector) generates for `prompts`. */
export async function plainOutputs(
  model = 'tiny',
  prompts = PROMPTS,
  maxTokens = GREEDY.maxTokens,
): Promise<number[][]> {
  const llm = await LLM.create({ model, num_gpu_blocks: 64, max_model_len: 256 });
  try {
    return (await llm.generate(prompts, { ...GREEDY, maxTokens })).map((o) => o.tokenIds);
  } finally {
    await llm.shutdown();
  }
}

/** Waits until the engine holds no blocks and no hand-off (bounded). */
export async function waitForEmptyPool(llm: LLM, timeoutMs = 5000): Promise<void> {
  const engine = await llm.engine();
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    await llm.waitIdle();
    if (engine.engine.schedulerStats().kvCacheUsage === 0 && !engine.engine.hasWork()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.equal(engine.engine.schedulerStats().kvCacheUsage, 0, 'the block pool returns to empty');
}
