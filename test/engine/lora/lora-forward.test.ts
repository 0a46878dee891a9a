/**
 * LoRA adapters against PyTorch (scripts/train/lora_ref.py, fixtures written by
 * scripts/train/fixtures.py): two random PEFT adapters of one random checkpoint, one on
 * every target with plain scaling (F32), one on q/v/down with rsLoRA (BF16). Logits of
 * every chunk's last position must match; one forward batch mixing both adapters and the
 * base model must give each sequence its own logits; greedy tokens through the engine
 * (tp 1 and 2) must equal PyTorch's.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { LLM } from '../../../src/engine/llm.ts';
import type { LoRARequest } from '../../../src/engine/lora/lora-request.ts';
import { readPeftAdapter } from '../../../src/engine/lora/peft-adapter.ts';
import { modelDims } from '../../../src/engine/model/dims.ts';
import type { LlamaModel } from '../../../src/engine/model/llama.ts';
import { loadModel, loadModelConfig } from '../../../src/engine/model/load.ts';
import { KVError } from '../../../src/errors/index.ts';
import { BlockAllocator, makeKV } from '../model/helpers/model.ts';
import { FIXTURES as MODEL_FIXTURES, readReference } from '../model/helpers/oracle.ts';

const MAX_ABS_ERROR = 2e-4;
const LORA_FIXTURES = fileURLToPath(new URL('./fixtures/', import.meta.url));
const BASE = join(MODEL_FIXTURES, 'hf', 'llama-gqa3-untied-f32');
const ADAPTERS: LoRARequest[] = ['all-targets-r4', 'qv-down-rslora-r8'].map((name, i) => ({
  loraName: name,
  loraIntId: i + 1,
  loraPath: join(LORA_FIXTURES, name),
}));
const CHUNKS = [5, 1, 3, 7, 16];

/** Last-row logits of each chunk of `prompt` fed through the paged cache with `lora`. */
async function chunkRows(model: LlamaModel, prompt: number[], lora: LoRARequest | null) {
  const config = loadModelConfig(BASE);
  const kv = makeKV(config, { numBlocks: 64 });
  const tables = new BlockAllocator(kv.numBlocks, 3).tables(1, prompt.length, 16);
  const rows = new Map<number, Float32Array>();
  let done = 0;
  for (let c = 0; done < prompt.length; c++) {
    const len = Math.min(CHUNKS[c % CHUNKS.length] as number, prompt.length - done);
    const out = await model.forward(
      {
        tokenIds: Int32Array.from(prompt.slice(done, done + len)),
        sequences: [
          { start: 0, len, numComputedTokens: done, blockTables: tables, computeLogits: true, lora },
        ],
      },
      kv,
    );
    rows.set(done + len - 1, out);
    done += len;
  }
  return rows;
}

function maxErr(rows: Map<number, Float32Array>, ref: Float32Array, vocab: number): number {
  let m = 0;
  for (const [pos, row] of rows)
    for (let i = 0; i < vocab; i++)
      m = Math.max(m, Math.abs((row[i] as number) - (ref[pos * vocab + i] as number)));
  return m;
}

describe('LoRA against PyTorch', () => {
  const vocab = loadModelConfig(BASE).vocab_size;
  for (const adapter of ADAPTERS) {
    test(`${adapter.loraName}: logits match PyTorch with the adapter and differ from the base`, async () => {
      const ref = readReference(adapter.loraPath);
      const base = readReference(BASE);
      const model = loadModel(BASE);
      for (const [i, prompt] of ref.prompts.entries()) {
        const rows = await chunkRows(model, prompt, adapter);
        const err = maxErr(rows, ref.logits[i] as Float32Array, vocab);
        assert.ok(err < MAX_ABS_ERROR, `prompt ${i}: max abs error ${err}`);
        assert.ok(
          maxErr(rows, base.logits[i] as Float32Array, vocab) > 0.1,
          'the adapter changes the logits',
        );
      }
    });
  }

  test('one batch mixing both adapters and the base model gives each sequence its own logits', async () => {
    const refs = [
      readReference(ADAPTERS[0]!.loraPath),
      readReference(BASE),
      readReference(ADAPTERS[1]!.loraPath),
    ];
    const loras = [ADAPTERS[0]!, null, ADAPTERS[1]!];
    const prompts = refs.map((r, i) => r.prompts[i] as number[]);
    const model = loadModel(BASE);
    const kv = makeKV(loadModelConfig(BASE), { numBlocks: 64 });
    const alloc = new BlockAllocator(kv.numBlocks, 5);
    let start = 0;
    const sequences = prompts.map((p, i) => {
      const s = {
        start,
        len: p.length,
        numComputedTokens: 0,
        blockTables: alloc.tables(1, p.length, 16),
        computeLogits: true,
        lora: loras[i] ?? null,
      };
      start += p.length;
      return s;
    });
    const out = await model.forward({ tokenIds: Int32Array.from(prompts.flat()), sequences }, kv);
    prompts.forEach((p, i) => {
      const row = out.subarray(i * vocab, (i + 1) * vocab);
      const err = maxErr(new Map([[p.length - 1, row]]), refs[i]!.logits[i] as Float32Array, vocab);
      assert.ok(err < MAX_ABS_ERROR, `sequence ${i}: max abs error ${err}`);
    });
  });

  for (const tp of [1, 2]) {
    test(`greedy tokens through the engine equal PyTorch's (tp=${tp}, adapters mixed in one run)`, async () => {
      const refs = ADAPTERS.map((a) => readReference(a.loraPath));
      const llm = await LLM.create({
        model: BASE,
        num_gpu_blocks: 64,
        max_model_len: 256,
        block_size: 16,
        tensor_parallel_size: tp,
      });
      try {
        const prompts = refs.flatMap((r) => r.prompts.map((promptTokenIds) => ({ promptTokenIds })));
        const loraRequest = refs.flatMap((r, k) => r.prompts.map(() => ADAPTERS[k]!));
        const out = await llm.generate(
          prompts,
          { maxTokens: 8, temperature: 0, ignoreEos: true },
          { loraRequest },
        );
        assert.deepEqual(
          out.map((o) => o.tokenIds),
          refs.flatMap((r) => r.greedy),
        );
      } finally {
        await llm.shutdown();
      }
    });
  }
});

describe('PEFT adapters are checked as vLLM checks them', () => {
  const dims = modelDims(loadModelConfig(BASE));
  const path = ADAPTERS[1]!.loraPath;
  const withConfig = (edit: (c: Record<string, unknown>) => void, body: (dir: string) => void) => {
    const dir = mkdtempSync(join(tmpdir(), 'kvconnect-lora-'));
    try {
      cpSync(path, dir, { recursive: true });
      const c = JSON.parse(readFileSync(join(dir, 'adapter_config.json'), 'utf8'));
      edit(c);
      writeFileSync(join(dir, 'adapter_config.json'), JSON.stringify(c));
      body(dir);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
  const rejects = (fn: () => unknown, code: string, message: string | RegExp) =>
    assert.throws(
      fn,
      (e) =>
        e instanceof KVError &&
        e.code === code &&
        (typeof message === 'string' ? e.message === message : message.test(e.message)),
    );

  test('rank above max_lora_rank, a missing directory, DoRA, modules_to_save, bias, a wrong shape', () => {
    assert.equal(readPeftAdapter(path, 'x', dims, 8).rank, 8);
    assert.equal(readPeftAdapter(path, 'x', dims).scaling, 6 / Math.sqrt(8));
    rejects(
      () => readPeftAdapter(path, 'x', dims, 4),
      'LORA_RANK_TOO_LARGE',
      'LoRA rank 8 is greater than max_lora_rank 4.',
    );
    rejects(
      () => readPeftAdapter('/nonexistent/adapter', 'x', dims),
      'LORA_ADAPTER_NOT_FOUND',
      'Loading lora x failed: No adapter found for /nonexistent/adapter',
    );
    withConfig(
      (c) => {
        c.use_dora = true;
      },
      (d) =>
        rejects(
          () => readPeftAdapter(d, 'x', dims),
          'LORA_ADAPTER_INVALID',
          'vLLM does not yet support DoRA.',
        ),
    );
    withConfig(
      (c) => {
        c.modules_to_save = ['lm_head'];
        c.use_dora = true;
      },
      (d) =>
        rejects(
          () => readPeftAdapter(d, 'x', dims),
          'LORA_ADAPTER_INVALID',
          'vLLM only supports modules_to_save being None., vLLM does not yet support DoRA.',
        ),
    );
    withConfig(
      (c) => {
        c.bias = 'all';
      },
      (d) =>
        rejects(
          () => readPeftAdapter(d, 'x', dims),
          'LORA_ADAPTER_INVALID',
          'Adapter bias cannot be used without bias_enabled.',
        ),
    );
    withConfig(
      (c) => {
        c.r = 4;
      },
      (d) =>
        rejects(
          () => readPeftAdapter(d, 'x', dims),
          'LORA_ADAPTER_INVALID',
          /has shape \[8, \d+\], expected \[4, \d+\]/,
        ),
    );
    withConfig(
      (c) => {
        delete c.lora_alpha;
      },
      (d) =>
        rejects(
          () => readPeftAdapter(d, 'x', dims),
          'LORA_ADAPTER_INVALID',
          "Missing required configuration fields: {'lora_alpha'}",
        ),
    );
  });

  test('an adapter of another model (more layers) is refused with the layer named', () => {
    const small = modelDims({
      ...loadModelConfig(BASE),
      num_hidden_layers: 1,
      layer_types: ['full_attention'],
    });
    rejects(() => readPeftAdapter(path, 'x', small), 'LORA_ADAPTER_INVALID', /layer 1 does not exist/);
  });
});
