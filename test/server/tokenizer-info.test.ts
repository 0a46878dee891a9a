/**
 * GET /tokenizer_info as vLLM serves it: only with --enable-tokenizer-info-endpoint (else
 * 404); the tokenizer's configuration as transformers keeps it (tokenizer_config.json, added
 * tokens as their text, no vocab/merges file paths, the chat template) and the class vLLM
 * reports (`Cached` + the fast class). A checkpoint with an AddedToken-style config (objects
 * with `content`) is written to a temporary directory.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { DEFAULT_MODEL, resolveModelPath } from '../../src/config/model-presets.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { type Served, serve, stop } from './helpers/served.ts';

setLogLevel('error');

const root = mkdtempSync(join(tmpdir(), 'kvconnect-tokinfo-'));
const running: Served[] = [];
after(async () => {
  await stop(...running);
  rmSync(root, { recursive: true, force: true });
});

async function info(s: Served): Promise<{ status: number; json: Record<string, unknown> }> {
  const r = await fetch(`${s.url}/tokenizer_info`);
  const text = await r.text();
  return { status: r.status, json: r.status === 200 ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

test('absent unless enabled, as vLLM', async () => {
  const s = await serve({ max_model_len: 64 });
  running.push(s);
  assert.equal((await info(s)).status, 404);
});

test(`${DEFAULT_MODEL}: tokenizer_config.json, its chat template and the cached fast class`, async () => {
  const s = await serve({ model: DEFAULT_MODEL, max_model_len: 64 }, { enableTokenizerInfoEndpoint: true });
  running.push(s);
  const r = await info(s);
  assert.equal(r.status, 200);
  const config = JSON.parse(
    readFileSync(join(resolveModelPath(DEFAULT_MODEL), 'tokenizer_config.json'), 'utf8'),
  ) as Record<string, unknown>;
  assert.deepEqual(r.json, {
    ...config,
    name_or_path: DEFAULT_MODEL,
    tokenizer_class: 'CachedPreTrainedTokenizerFast',
  });
});

test('added tokens as text, file paths dropped, a slow class named by its fast one', async () => {
  const dir = join(root, 'ckpt');
  cpSync(resolveModelPath(DEFAULT_MODEL), dir, { recursive: true });
  writeFileSync(
    join(dir, 'tokenizer_config.json'),
    JSON.stringify({
      tokenizer_class: 'LlamaTokenizer',
      bos_token: { __type: 'AddedToken', content: '<|begin_of_text|>', lstrip: false },
      eos_token: '<|end_of_text|>',
      added_tokens_decoder: { '0': { content: '<|begin_of_text|>', special: true } },
      vocab_file: '/somewhere/tokenizer.model',
      merges_file: '/somewhere/merges.txt',
    }),
  );
  writeFileSync(join(dir, 'chat_template.jinja'), '{% for m in messages %}{{ m.content }}{% endfor %}');
  const s = await serve({ model: dir, max_model_len: 64 }, { enableTokenizerInfoEndpoint: true });
  running.push(s);
  const r = await info(s);
  assert.deepEqual(r.json, {
    tokenizer_class: 'CachedLlamaTokenizerFast',
    bos_token: '<|begin_of_text|>',
    eos_token: '<|end_of_text|>',
    added_tokens_decoder: { '0': '<|begin_of_text|>' },
    chat_template: '{% for m in messages %}{{ m.content }}{% endfor %}',
    name_or_path: dir,
  });
});

test('a model without tokenizer files names the byte mapping', async () => {
  const s = await serve({ max_model_len: 64 }, { enableTokenizerInfoEndpoint: true });
  running.push(s);
  const r = await info(s);
  assert.equal(r.status, 200);
  assert.equal(r.json['tokenizer_class'], 'ByteTokenizer');
  assert.equal(r.json['bos_token_id'], s.engine.tokenizer.bosTokenId);
});
