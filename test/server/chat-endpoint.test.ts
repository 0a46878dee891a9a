/**
 * /v1/chat/completions renders the model's own chat template: kjv-llama's (BOS, then each
 * message's text on its own line) through a real server, and a template error is a 400
 * while the server keeps serving.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { DEFAULT_MODEL, resolveModelPath } from '../../src/config/model-presets.ts';
import type { AsyncEngineLike } from '../../src/engine/api.ts';
import { postJson, type Running, startEngine, startServer } from './helpers/harness.ts';

const root = mkdtempSync(join(tmpdir(), 'kvconnect-chat-'));
const running: Array<{ engine: AsyncEngineLike; server: Running }> = [];
after(async () => {
  for (const r of running) {
    await r.server.close();
    await r.engine.shutdown();
  }
  rmSync(root, { recursive: true, force: true });
});

async function serve(model: string): Promise<{ engine: AsyncEngineLike; url: string }> {
  const engine = await startEngine({ model, max_model_len: 256 });
  const server = await startServer({ engine });
  running.push({ engine, server });
  return { engine, url: server.url };
}

const messages = [
  { role: 'system', content: 'And God said,' },
  { role: 'user', content: 'Let there be light:' },
];

test(`${DEFAULT_MODEL}: the chat prompt is the model's template, BOS once, and the reply is text`, async () => {
  const { engine, url } = await serve(DEFAULT_MODEL);
  const tok = engine.tokenizer;
  const rendered = tok.applyChatTemplate(messages);
  assert.equal(rendered, '<|begin_of_text|>And God said,\nLet there be light:\n');
  const expected = tok.encodeChat(messages);
  assert.equal(expected.filter((id) => id === tok.bosTokenId).length, 1);
  const res = await postJson(`${url}/v1/chat/completions`, {
    model: DEFAULT_MODEL,
    messages,
    max_tokens: 8,
    temperature: 0,
    logprobs: true,
    return_tokens_as_token_ids: true,
  });
  assert.equal(res.status, 200);
  const body = (await res.json()) as {
    usage: { prompt_tokens: number };
    choices: Array<{ message: { content: string }; logprobs: { content: Array<{ token: string }> } }>;
  };
  assert.equal(body.usage.prompt_tokens, expected.length);
  // The same prompt ids sent as a completion give the same tokens.
  const viaIds = await postJson(`${url}/v1/completions`, {
    model: DEFAULT_MODEL,
    prompt: expected,
    max_tokens: 8,
    temperature: 0,
    logprobs: 0,
    return_tokens_as_token_ids: true,
  });
  const idsBody = (await viaIds.json()) as { choices: Array<{ logprobs: { tokens: string[] } }> };
  assert.deepEqual(
    body.choices[0]?.logprobs.content.map((c) => c.token),
    idsBody.choices[0]?.logprobs.tokens,
  );
  assert.match(body.choices[0]?.message.content ?? '', /[A-Za-z]{2,}/);
});

test('a chat template that raises answers 400 CHAT_TEMPLATE_ERROR, and the server keeps serving', async () => {
  const dir = join(root, 'strict');
  cpSync(resolveModelPath(DEFAULT_MODEL), dir, { recursive: true });
  const configFile = join(dir, 'tokenizer_config.json');
  const config = JSON.parse(readFileSync(configFile, 'utf8')) as Record<string, unknown>;
  config.chat_template =
    "{% for m in messages %}{% if m['role'] not in ['user', 'assistant'] %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{{ m['content'] }}\n{% endfor %}";
  writeFileSync(configFile, JSON.stringify(config));
  const { url } = await serve(dir);
  const bad = await postJson(`${url}/v1/chat/completions`, { model: dir, messages, max_tokens: 2 });
  assert.equal(bad.status, 400);
  const error = ((await bad.json()) as { error: { kvconnect_code: string; message: string } }).error;
  assert.equal(error.kvconnect_code, 'CHAT_TEMPLATE_ERROR');
  assert.match(error.message, /Only user and assistant roles are supported!/);
  const good = await postJson(`${url}/v1/chat/completions`, {
    model: dir,
    messages: [{ role: 'user', content: 'In the beginning' }],
    max_tokens: 2,
  });
  assert.equal(good.status, 200);
});
