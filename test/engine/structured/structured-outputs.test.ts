import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildEmulationConfig } from '../../../src/config/emulation-config.ts';
import { buildEngineConfig } from '../../../src/config/engine-config.ts';
import { AsyncEngine } from '../../../src/engine/async-engine.ts';
import { LLM } from '../../../src/engine/llm.ts';
import { StructuredOutputBackend } from '../../../src/engine/structured/backend.ts';
import type { StructuredOutputsParams } from '../../../src/engine/structured/params.ts';
import { ByteTokenizer } from '../../../src/tokenizer/byte-tokenizer.ts';
import { loadTokenizer } from '../../../src/tokenizer/load.ts';

function allowed(mask: Int32Array, vocabSize: number): number[] {
  const ids: number[] = [];
  for (let i = 0; i < vocabSize; i++) if (((mask[i >> 5] as number) >>> (i & 31)) & 1) ids.push(i);
  return ids;
}

test('byte tokenizer: the mask allows exactly the bytes the grammar allows, EOS only at the end', async () => {
  const tokenizer = new ByteTokenizer();
  const backend = new StructuredOutputBackend(() => tokenizer, tokenizer.vocabSize);
  const grammar = await backend.matcher({ choice: ['ab', 'cé'] }, []);
  assert.deepEqual(allowed(await grammar.nextMask(), tokenizer.vocabSize), [0x61, 0x63]);
  assert.equal(grammar.accept(0x63), true);
  // 'é' is two UTF-8 bytes: the grammar walks them one token at a time.
  assert.deepEqual(allowed(await grammar.nextMask(), tokenizer.vocabSize), [0xc3]);
  grammar.accept(0xc3);
  assert.deepEqual(allowed(await grammar.nextMask(), tokenizer.vocabSize), [0xa9]);
  grammar.accept(0xa9);
  assert.deepEqual(allowed(await grammar.nextMask(), tokenizer.vocabSize), [tokenizer.eosTokenId]);
  const logits = new Float32Array(tokenizer.vocabSize).fill(1);
  grammar.maskLogits(logits, await grammar.nextMask());
  assert.deepEqual(
    [...logits.keys()].filter((i) => logits[i] === 1),
    [tokenizer.eosTokenId],
  );
  grammar.dispose();
});

test('a matcher replays the output a request already has', async () => {
  const tokenizer = new ByteTokenizer();
  const backend = new StructuredOutputBackend(() => tokenizer, tokenizer.vocabSize);
  const grammar = await backend.matcher({ regex: '[0-9]{2}x' }, [0x31, 0x32]);
  assert.deepEqual(allowed(await grammar.nextMask(), tokenizer.vocabSize), [0x78]);
  grammar.dispose();
});

test('byte-level BPE (kjv-llama): vocabulary typed from the decoder, multi-byte tokens masked', async () => {
  const tokenizer = loadTokenizer('kjv-llama');
  const vocabulary = tokenizer.grammarVocabulary?.();
  assert.equal(vocabulary?.kind, 'byte_level');
  assert.equal(vocabulary?.tokens[tokenizer.eosTokenId], '', 'special tokens are empty');
  const backend = new StructuredOutputBackend(() => tokenizer, tokenizer.vocabSize);
  const choices = [' thereof', ' them'];
  const grammar = await backend.matcher({ choice: choices }, []);
  const first = allowed(await grammar.nextMask(), tokenizer.vocabSize).map((id) => tokenizer.decode([id]));
  // 'Ġ' of the byte-level alphabet is the space: whole-word tokens start a choice.
  assert.ok(first.includes(' thereof') && first.includes(' them') && first.includes(' the'), first.join('|'));
  for (const text of first)
    assert.ok(
      choices.some((c) => c.startsWith(text)),
      text,
    );
  grammar.dispose();
});

test('structural tags: the format object and the legacy structures with triggers', async () => {
  const tokenizer = new ByteTokenizer();
  const backend = new StructuredOutputBackend(() => tokenizer, tokenizer.vocabSize);
  const bytes = (text: string) => [...new TextEncoder().encode(text)];
  const sequence = {
    type: 'structural_tag',
    format: {
      type: 'sequence',
      elements: [
        { type: 'const_string', value: 'n=' },
        { type: 'regex', pattern: '[0-9]' },
      ],
    },
  };
  const fixed = await backend.matcher({ structuralTag: JSON.stringify(sequence) }, []);
  assert.deepEqual(allowed(await fixed.nextMask(), tokenizer.vocabSize), bytes('n'));
  fixed.dispose();
  const legacy = {
    structures: [{ begin: '<n>', schema: { type: 'integer' }, end: '</n>' }],
    triggers: ['<n>'],
  };
  const triggered = await backend.matcher({ structuralTag: JSON.stringify(legacy) }, bytes('free text <n>'));
  const next = allowed(await triggered.nextMask(), tokenizer.vocabSize);
  assert.ok(next.length > 0 && next.every((id) => bytes('-0123456789').includes(id)), String(next));
  triggered.dispose();
});

test('an invalid constraint is a 400 that names it', async () => {
  const tokenizer = new ByteTokenizer();
  const backend = new StructuredOutputBackend(() => tokenizer, tokenizer.vocabSize);
  await assert.rejects(backend.compile({ grammar: 'root ::= (' }), /Invalid grammar specification/);
  await assert.rejects(backend.compile({ json: { type: 5 } }), /Invalid JSON schema/);
  // The backend keeps working after XGrammar refused an input.
  await backend.compile({ grammar: 'root ::= "ok"' });
});

test('engine: constrained greedy outputs follow the constraint and repeat exactly', async () => {
  const llm = await LLM.create({ model: 'kjv-llama', num_gpu_blocks: 64, max_model_len: 256 });
  try {
    const cases: Array<[StructuredOutputsParams, (text: string) => void]> = [
      [{ regex: '[0-9]{3}-[a-z]{2}' }, (t) => assert.match(t, /^[0-9]{3}-[a-z]{2}$/)],
      [
        { choice: ['Genesis', 'Exodus', 'Leviticus'] },
        (t) => assert.ok(['Genesis', 'Exodus', 'Leviticus'].includes(t)),
      ],
      [
        {
          json: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] },
          disableAnyWhitespace: true,
        },
        (t) => assert.equal(typeof JSON.parse(t).ok, 'boolean'),
      ],
    ];
    for (const [params, check] of cases) {
      const run = () =>
        llm.generate('In the beginning God created', {
          maxTokens: 40,
          temperature: 0,
          structuredOutputs: params,
        });
      const [a] = await run();
      const [b] = await run();
      assert.equal(a?.finishReason, 'stop', JSON.stringify(a?.text));
      check(a?.text ?? '');
      assert.deepEqual(b?.tokenIds, a?.tokenIds);
    }
  } finally {
    await llm.shutdown();
  }
});

test('tensor parallel: every rank applies the grammar in its worker thread, same tokens as tp = 1', async () => {
  const params = {
    maxTokens: 40,
    temperature: 0,
    structuredOutputs: { regex: '[a-z]{1,6}( [a-z]{1,6}){2}' },
  };
  const outputs: number[][] = [];
  for (const tp of [1, 2]) {
    const llm = await LLM.create({
      model: 'kjv-llama',
      num_gpu_blocks: 64,
      max_model_len: 256,
      tensor_parallel_size: tp,
    });
    try {
      const [o] = await llm.generate('In the beginning God created', params);
      assert.equal(o?.finishReason, 'stop');
      assert.match(o?.text ?? '', /^[a-z]{1,6}( [a-z]{1,6}){2}$/);
      outputs.push(o?.tokenIds ?? []);
    } finally {
      await llm.shutdown();
    }
  }
  assert.deepEqual(outputs[1], outputs[0]);
});

test('an engine without a model (--mode random) refuses a constraint with a 400', async () => {
  const config = buildEngineConfig({ model: 'tiny', num_gpu_blocks: 16, max_model_len: 128 });
  config.emulation = buildEmulationConfig({ mode: 'random' }, config.model.seed);
  const engine = await AsyncEngine.create(config);
  try {
    await assert.rejects(
      engine.validateStructuredOutputs({ regex: 'a' }),
      (e: Error & { field?: string }) => {
        assert.match(e.message, /Structured outputs need the model's logits/);
        assert.equal(e.field, 'structured_outputs');
        return true;
      },
    );
  } finally {
    await engine.shutdown();
  }
});
