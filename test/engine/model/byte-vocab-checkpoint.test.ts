/**
 * A checkpoint without tokenizer.json: text is encoded as UTF-8 bytes, but the vocabulary
 * and the special ids are the checkpoint's. Every id below `vocab_size` is a valid prompt
 * and /detokenize id (the model generates up to vocab_size - 1), BOS and EOS come from
 * config.json, and the special ids decode to nothing.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { AsyncEngineLike } from '../../../src/engine/api.ts';
import {
  readSafetensorsFile,
  tensorToFloat32,
  writeSafetensorsFile,
} from '../../../src/engine/model/safetensors.ts';
import { loadTokenizer } from '../../../src/tokenizer/load.ts';
import { postJson, type Running, startEngine, startServer } from '../../server/helpers/harness.ts';
import { FIXTURES } from './helpers/oracle.ts';

const VOCAB = 400;
const BOS = 300;
const EOS = 301;
const root = mkdtempSync(join(tmpdir(), 'kvconnect-byte-vocab-'));
let dir: string;
let engine: AsyncEngineLike;
let running: Running;

/** The fixture checkpoint with its vocabulary grown from 160 to 400 ids (new rows: small values). */
function grownCheckpoint(): string {
  const out = join(root, 'ckpt');
  cpSync(join(FIXTURES, 'hf', 'llama-gqa3-untied-f32'), out, { recursive: true });
  const config = JSON.parse(readFileSync(join(out, 'config.json'), 'utf8')) as Record<string, unknown>;
  const oldVocab = config['vocab_size'] as number;
  Object.assign(config, { vocab_size: VOCAB, bos_token_id: BOS, eos_token_id: EOS });
  writeFileSync(join(out, 'config.json'), JSON.stringify(config));
  const file = join(out, 'model.safetensors');
  const tensors = new Map(
    [...readSafetensorsFile(file)].map(([name, t]) => {
      let shape = [...t.shape];
      let data = tensorToFloat32(t);
      if (shape[0] === oldVocab) {
        const width = shape[1] ?? 1;
        const grown = new Float32Array(VOCAB * width);
        grown.set(data);
        for (let i = data.length; i < grown.length; i++) grown[i] = Math.sin(i) * 0.02;
        shape = [VOCAB, ...shape.slice(1)];
        data = grown;
      }
      return [name, { dtype: 'F32' as const, shape, data }];
    }),
  );
  writeSafetensorsFile(file, tensors);
  return out;
}

before(async () => {
  dir = grownCheckpoint();
  engine = await startEngine({ model: dir, max_model_len: 128 });
  running = await startServer({ engine });
});

after(async () => {
  await running?.close();
  await engine?.shutdown();
  rmSync(root, { recursive: true, force: true });
});

test("the byte tokenizer takes the checkpoint's vocab_size, BOS and EOS", () => {
  const tok = loadTokenizer(dir);
  assert.equal(tok.vocabSize, VOCAB);
  assert.equal(tok.bosTokenId, BOS);
  assert.equal(tok.eosTokenId, EOS);
  assert.deepEqual(tok.encode('Hi'), [BOS, 72, 105]);
  assert.equal(tok.decode([BOS, 72, 399, 105, EOS]), 'Hi', 'special and non-byte ids decode to nothing');
  assert.equal(engine.tokenizer.eosTokenId, EOS);
});

test('prompt and /detokenize ids up to vocab_size - 1 are accepted; vocab_size is refused', async () => {
  const ok = await postJson(`${running.url}/v1/completions`, {
    prompt: [BOS, 350, VOCAB - 1],
    max_tokens: 2,
    temperature: 0,
  });
  assert.equal(ok.status, 200, await ok.clone().text());
  const bad = await postJson(`${running.url}/v1/completions`, { prompt: [BOS, VOCAB], max_tokens: 2 });
  assert.equal(bad.status, 400);
  const detok = await postJson(`${running.url}/detokenize`, { tokens: [72, VOCAB - 1, 105] });
  assert.equal(detok.status, 200);
  assert.deepEqual(await detok.json(), { prompt: 'Hi' });
  assert.equal((await postJson(`${running.url}/detokenize`, { tokens: [VOCAB] })).status, 400);
  const tok = await postJson(`${running.url}/tokenize`, { prompt: 'Hi' });
  assert.deepEqual(((await tok.json()) as { tokens: number[] }).tokens, [BOS, 72, 105]);
});
