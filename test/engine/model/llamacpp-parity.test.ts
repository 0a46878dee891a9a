/**
 * The engine against llama.cpp (node-llama-cpp's prebuilt CPU binary, a devDependency): kjv-llama
 * converted to GGUF F32 (scripts/gguf/convert.ts) must tokenize every prompt of a fixed set to
 * the ids our tokenizer gives, and decode greedily to the same token ids as the engine. llama.cpp
 * runs with an F32 KV cache and no flash attention, so both sides compute in float32; ids are
 * compared, never text. A machine where node-llama-cpp's binary does not load fails this test.
 * The benchmark's C harness (bench/_llamacpp-harness.ts, the same llama.cpp libraries without
 * node-llama-cpp) must decode the same ids too.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { Llama } from 'node-llama-cpp';
import { LlamaCppEngine, loadLlamaCpp } from '../../../bench/_llamacpp.ts';
import { buildLlamaCppHarness, LlamaCppHarness } from '../../../bench/_llamacpp-harness.ts';
import { convertCheckpoint } from '../../../scripts/gguf/convert.ts';
import { LLM } from '../../../src/engine/llm.ts';
import type { TokenizerLike } from '../../../src/tokenizer/types.ts';

const KJV = fileURLToPath(new URL('../../../models/kjv-llama', import.meta.url));
const PROMPTS = [
  'In the beginning God created the heaven and the earth.',
  'And the LORD said unto Moses,',
  'Blessed are the meek: for they shall inherit the earth.',
  'And it came to pass in those days, that there went out a decree from Caesar Augustus, that all the world should be taxed. (And this taxing was first made when Cyrenius was governor of Syria.)',
  'Psalm 23:1 The LORD is my shepherd; I shall not want.',
  "  two spaces, a tab\tand a newline\nthen 12345 digits & symbols: don't stop!",
  'light',
];
const MAX_TOKENS = 24;

const dir = mkdtempSync(join(tmpdir(), 'kvconnect-llamacpp-'));
const gguf = join(dir, 'kjv-llama-f32.gguf');
let llama: Llama;
let cpp: LlamaCppEngine;
let llm: LLM;
let tokenizer: TokenizerLike;

before(async () => {
  convertCheckpoint(KJV, [{ file: gguf, dtype: 'f32' }]);
  llama = await loadLlamaCpp(1);
  cpp = await LlamaCppEngine.open(llama, gguf, {
    threads: 1,
    contextSize: 256,
    kvCache: 'f32',
    flashAttention: false,
  });
  llm = await LLM.create({ model: KJV, max_model_len: 256, enable_prefix_caching: false });
  tokenizer = (await llm.engine()).tokenizer;
});

after(async () => {
  await cpp?.dispose();
  await llama?.dispose();
  await llm?.shutdown();
  rmSync(dir, { recursive: true, force: true });
});

test('llama.cpp tokenizes every prompt to our ids (after BOS)', () => {
  for (const text of PROMPTS) {
    const ours = tokenizer.encode(text);
    assert.equal(ours[0], 2046, 'our encoding starts with BOS');
    assert.deepEqual(cpp.tokenize(text), ours.slice(1), text);
  }
});

/** The prompts' ids and the engine's greedy token ids for each (generated once). */
let engineRun: Promise<{ prompts: number[][]; ours: { tokenIds: number[] }[] }> | undefined;
function engineGreedy(): Promise<{ prompts: number[][]; ours: { tokenIds: number[] }[] }> {
  engineRun ??= (async () => {
    const prompts = PROMPTS.map((text) => tokenizer.encode(text));
    const ours = await llm.generate(
      prompts.map((promptTokenIds) => ({ promptTokenIds })),
      { maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true },
    );
    return { prompts, ours };
  })();
  return engineRun;
}

test("greedy decoding: the engine's token ids equal llama.cpp F32's on every prompt", async () => {
  const { prompts, ours } = await engineGreedy();
  for (const [i, ids] of prompts.entries()) {
    const theirs = await cpp.greedy(ids, MAX_TOKENS);
    assert.equal(ours[i]!.tokenIds.length, MAX_TOKENS);
    assert.deepEqual(ours[i]!.tokenIds, theirs.tokens, `prompt ${i}: ${JSON.stringify(PROMPTS[i])}`);
  }
});

test("the benchmark's C harness decodes the engine's token ids too", async () => {
  const build = buildLlamaCppHarness();
  const harness = await LlamaCppHarness.open(build, gguf, {
    threads: 1,
    contextSize: 256,
    kvCache: 'f32',
    flashAttention: 'off',
  });
  try {
    const { prompts, ours } = await engineGreedy();
    for (const [i, ids] of prompts.entries()) {
      const theirs = await harness.greedy(ids, MAX_TOKENS);
      assert.ok(theirs.prefillMs > 0 && theirs.decodeMs > 0, 'the harness times both phases');
      assert.deepEqual(ours[i]!.tokenIds, theirs.tokens, `prompt ${i}: ${JSON.stringify(PROMPTS[i])}`);
    }
  } finally {
    await harness.dispose();
    build.dispose();
  }
});
