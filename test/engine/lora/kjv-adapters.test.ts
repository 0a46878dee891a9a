/**
 * The two adapters shipped with kjv-llama (models/kjv-llama/adapters/, trained by
 * scripts/train/train_lora.py): checked against PyTorch as the base model is (logits of
 * every chunk, greedy tokens through the engine), and their effect on greedy output:
 * kjv-modern writes "you"/"your" instead of "thee"/"thy"/"ye", kjv-verses numbers the
 * lines it starts.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { readModelSource } from '../../../src/config/model-info.ts';
import { DEFAULT_MODEL } from '../../../src/config/model-presets.ts';
import { LLM } from '../../../src/engine/llm.ts';
import type { LoRARequest } from '../../../src/engine/lora/lora-request.ts';
import { loadModel, loadModelConfig } from '../../../src/engine/model/load.ts';
import { BlockAllocator, makeKV } from '../model/helpers/model.ts';
import { readReference } from '../model/helpers/oracle.ts';

const MAX_ABS_ERROR = 2e-4;
const FIXTURES = fileURLToPath(new URL('./fixtures/', import.meta.url));
const modelDir = readModelSource(DEFAULT_MODEL).directory as string;
const adapter = (name: string, id: number): LoRARequest => ({
  loraName: name,
  loraIntId: id,
  loraPath: join(modelDir, 'adapters', name),
});
const MODERN = adapter('kjv-modern', 1);
const VERSES = adapter('kjv-verses', 2);

describe('the adapters shipped with kjv-llama', () => {
  for (const lora of [MODERN, VERSES]) {
    test(`${lora.loraName}: logits of every chunk and greedy tokens match PyTorch`, async () => {
      const ref = readReference(join(FIXTURES, lora.loraName));
      const config = loadModelConfig(DEFAULT_MODEL);
      const vocab = config.vocab_size;
      const model = loadModel(DEFAULT_MODEL);
      for (const [i, prompt] of ref.prompts.entries()) {
        const kv = makeKV(config, { numBlocks: 32 });
        const tables = new BlockAllocator(kv.numBlocks, 1).tables(1, prompt.length, 16);
        let done = 0;
        for (const len of [2, 1, prompt.length]) {
          const n = Math.min(len, prompt.length - done);
          if (n <= 0) break;
          const row = await model.forward(
            {
              tokenIds: Int32Array.from(prompt.slice(done, done + n)),
              sequences: [
                { start: 0, len: n, numComputedTokens: done, blockTables: tables, computeLogits: true, lora },
              ],
            },
            kv,
          );
          done += n;
          const expected = (ref.logits[i] as Float32Array).subarray((done - 1) * vocab, done * vocab);
          let err = 0;
          for (let v = 0; v < vocab; v++) err = Math.max(err, Math.abs(row[v]! - expected[v]!));
          assert.ok(err < MAX_ABS_ERROR, `prompt ${i} position ${done - 1}: max abs error ${err}`);
        }
      }
      assert.ok(ref.min_greedy_margin > 10 * MAX_ABS_ERROR, `margin ${ref.min_greedy_margin}`);
      const llm = await LLM.create({ model: DEFAULT_MODEL, num_gpu_blocks: 32, max_model_len: 128 });
      try {
        const out = await llm.generate(
          ref.prompts.map((promptTokenIds) => ({ promptTokenIds })),
          { maxTokens: ref.greedy[0]?.length ?? 0, temperature: 0, ignoreEos: true },
          { loraRequest: lora },
        );
        assert.deepEqual(
          out.map((o) => o.tokenIds),
          ref.greedy,
        );
      } finally {
        await llm.shutdown();
      }
    });
  }

  test('their effect shows in greedy output: modern pronouns, numbered lines', async () => {
    const llm = await LLM.create({ model: DEFAULT_MODEL, num_gpu_blocks: 64, max_model_len: 128 });
    try {
      const run = async (prompts: string[], lora: LoRARequest | null) =>
        (
          await llm.generate(
            prompts,
            { maxTokens: 24, temperature: 0, ignoreEos: true },
            { loraRequest: lora },
          )
        ).map((o) => o.text);
      const sayings = ['And the LORD said unto Moses,', 'And he said unto them,', 'Hear, O Israel:'];
      const archaic = (texts: string[]) =>
        texts.join(' ').match(/\b(thee|thou|thy|thine|ye|hath|saith|unto)\b/gi)?.length ?? 0;
      const modern = (texts: string[]) => texts.join(' ').match(/\b(you|your)\b/gi)?.length ?? 0;
      const [base, modernized] = [await run(sayings, null), await run(sayings, MODERN)];
      assert.ok(archaic(base) >= 3, `the base model writes archaic forms: ${JSON.stringify(base)}`);
      assert.equal(archaic(modernized), 0, JSON.stringify(modernized));
      assert.ok(modern(modernized) >= 2, JSON.stringify(modernized));

      const verses = [
        'In the beginning God created the heaven and the earth.\n',
        'Blessed are the poor in spirit: for theirs is the kingdom of heaven.\n',
      ];
      const numbered = (texts: string[]) =>
        texts.flatMap((t) => t.split('\n')).filter((line) => /^\d+ [A-Z]/.test(line)).length;
      const [plain, withVerses] = [await run(verses, null), await run(verses, VERSES)];
      assert.equal(numbered(plain), 0, JSON.stringify(plain));
      assert.ok(numbered(withVerses) >= 2, JSON.stringify(withVerses));
    } finally {
      await llm.shutdown();
    }
  });
});
