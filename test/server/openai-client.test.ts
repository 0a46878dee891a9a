/**
 * The official `openai` client against a real server (real AsyncEngine, tiny model, port 0):
 * completions and chat, streaming and not, usage, stop, n, logprobs, seeds.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import type { AsyncEngineLike } from '../../src/engine/api.ts';
import { type Running, startEngine, startServer } from './helpers/harness.ts';

let engine: AsyncEngineLike;
let running: Running;
let client: OpenAI;

before(async () => {
  engine = await startEngine();
  running = await startServer({ engine });
  client = new OpenAI({ baseURL: `${running.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  await running?.close();
  await engine?.shutdown();
});

/** Fields the server accepts beyond OpenAI's typed parameters. */
const ignoreEos = { ignore_eos: true } as Record<string, unknown>;
/** Chosen tokens named by id (vLLM's `token_id:N`): outputs are compared by token ids, not decoded text. */
const withIds = { logprobs: 0, return_tokens_as_token_ids: true } as Record<string, unknown>;
const ids = (c: { logprobs?: { tokens?: string[] } | null } | undefined): string[] => {
  const tokens = c?.logprobs?.tokens ?? [];
  assert.ok(tokens.length > 0 && tokens.every((t) => /^token_id:\d+$/.test(t)), `token ids ${tokens}`);
  return tokens;
};

test('completions: greedy text, usage and length finish; streaming yields the same text', async () => {
  const params = {
    model: 'tiny',
    prompt: 'The cat',
    max_tokens: 6,
    temperature: 0,
    ...ignoreEos,
    ...withIds,
  };
  const full = await client.completions.create(params);
  assert.equal(full.object, 'text_completion');
  assert.equal(full.choices.length, 1);
  assert.equal(full.choices[0]?.finish_reason, 'length');
  assert.equal(full.usage?.completion_tokens, 6);
  assert.equal(full.usage?.prompt_tokens, engine.tokenizer.encode('The cat').length);
  assert.equal(full.usage?.total_tokens, (full.usage?.prompt_tokens ?? 0) + 6);

  const stream = await client.completions.create({
    ...params,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  const streamed: string[] = [];
  let finish: string | null = null;
  let usage: OpenAI.CompletionUsage | undefined;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.text;
      streamed.push(...(c.logprobs?.tokens ?? []));
      finish = c.finish_reason ?? finish;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.deepEqual(streamed, ids(full.choices[0]));
  assert.equal(text, full.choices[0]?.text);
  assert.equal(finish, 'length');
  assert.deepEqual(usage, full.usage);
});

test('chat: message content and the stream (role first, then content) agree', async () => {
  const messages = [{ role: 'user' as const, content: 'Say hi' }];
  const full = await client.chat.completions.create({
    model: 'tiny',
    messages,
    max_completion_tokens: 5,
    temperature: 0,
    logprobs: true,
    ...ignoreEos,
    return_tokens_as_token_ids: true,
  } as OpenAI.ChatCompletionCreateParamsNonStreaming);
  assert.equal(full.object, 'chat.completion');
  assert.equal(full.choices[0]?.message.role, 'assistant');
  assert.equal(full.usage?.completion_tokens, 5);
  const stream = await client.chat.completions.create({
    model: 'tiny',
    messages,
    max_tokens: 5,
    temperature: 0,
    stream: true,
    logprobs: true,
    ...ignoreEos,
    return_tokens_as_token_ids: true,
  } as OpenAI.ChatCompletionCreateParamsStreaming);
  const chosen = (entries: { token: string }[] | null | undefined) => (entries ?? []).map((e) => e.token);
  const streamed: string[] = [];
  let text = '';
  let sawRoleFirst = false;
  let first = true;
  for await (const chunk of stream) {
    const delta = chunk.choices[0]?.delta;
    if (first) sawRoleFirst = delta?.role === 'assistant';
    first = false;
    text += delta?.content ?? '';
    streamed.push(...chosen(chunk.choices[0]?.logprobs?.content));
  }
  assert.ok(sawRoleFirst);
  const fullIds = chosen(full.choices[0]?.logprobs?.content);
  assert.equal(fullIds.length, 5);
  assert.ok(
    fullIds.every((t) => /^token_id:\d+$/.test(t)),
    `token ids ${fullIds}`,
  );
  assert.deepEqual(streamed, fullIds);
  assert.equal(text, full.choices[0]?.message.content);
});

test('prompt as token ids gives the same completion as the text it encodes', async () => {
  const promptIds = engine.tokenizer.encode('Once upon');
  const a = await client.completions.create({
    model: 'tiny',
    prompt: 'Once upon',
    max_tokens: 4,
    temperature: 0,
    ...withIds,
  });
  const b = await client.completions.create({
    model: 'tiny',
    prompt: promptIds,
    max_tokens: 4,
    temperature: 0,
    ...withIds,
  });
  assert.deepEqual(ids(b.choices[0]), ids(a.choices[0]));
  assert.equal(b.choices[0]?.text, a.choices[0]?.text);
  assert.equal(b.usage?.prompt_tokens, promptIds.length);
});

test('stop: generation ends before the stop string with finish_reason stop', async () => {
  const base = await client.completions.create({
    model: 'tiny',
    prompt: 'abc',
    max_tokens: 12,
    temperature: 0,
    ...ignoreEos,
  });
  const text = base.choices[0]?.text ?? '';
  // A stop string taken from inside the greedy output (printable ASCII so it survives decoding).
  const at = [...text].findIndex((ch, i) => i >= 2 && /[ -~]/.test(ch));
  if (at < 0) return assert.fail(`no printable character to stop on in ${JSON.stringify(text)}`);
  const stop = [...text][at]!;
  const cut = text.indexOf(stop);
  const stopped = await client.completions.create({
    model: 'tiny',
    prompt: 'abc',
    max_tokens: 12,
    temperature: 0,
    stop,
    ...ignoreEos,
  });
  assert.equal(stopped.choices[0]?.finish_reason, 'stop');
  assert.equal(stopped.choices[0]?.text, text.slice(0, cut));
});

test('n choices with a seed are reproducible, and choice 0 equals the n=1 request', async () => {
  const params = {
    model: 'tiny',
    prompt: 'Random',
    max_tokens: 8,
    temperature: 1,
    seed: 1234,
    ...ignoreEos,
    ...withIds,
  };
  const a = await client.completions.create({ ...params, n: 3 });
  const b = await client.completions.create({ ...params, n: 3 });
  assert.deepEqual(
    a.choices.map((c) => c.index),
    [0, 1, 2],
  );
  assert.deepEqual(a.choices.map(ids), b.choices.map(ids));
  assert.equal(a.usage?.completion_tokens, 24);
  assert.equal(a.usage?.prompt_tokens, engine.tokenizer.encode('Random').length);
  const single = await client.completions.create({ ...params, n: 1 });
  assert.deepEqual(ids(single.choices[0]), ids(a.choices[0]));
  const samples = new Set(a.choices.map((c) => ids(c).join(',')));
  assert.ok(samples.size > 1, 'different per-choice seeds should give different samples');
});

test('logprobs: completions top-N arrays and chat content entries', async () => {
  const c = await client.completions.create({
    model: 'tiny',
    prompt: 'Hi',
    max_tokens: 4,
    temperature: 0,
    logprobs: 3,
    ...ignoreEos,
  });
  const lp = c.choices[0]?.logprobs;
  assert.ok(lp);
  assert.equal(lp.tokens?.length, 4);
  assert.equal(lp.token_logprobs?.length, 4);
  assert.equal(lp.text_offset?.length, 4);
  for (const v of lp.token_logprobs ?? []) assert.ok(v <= 0 && Number.isFinite(v));
  for (const top of lp.top_logprobs ?? []) {
    const n = Object.keys(top).length;
    assert.ok(n >= 1 && n <= 3);
  }
  // Greedy: the chosen token's logprob is the maximum of its step (tokens of the same text
  // share one key, the later one's value, as in vLLM's dict).
  const best = Math.max(...Object.values(lp.top_logprobs?.[0] ?? {}));
  assert.ok((lp.token_logprobs?.[0] ?? 0) >= best - 1e-9);

  const chat = await client.chat.completions.create({
    model: 'tiny',
    messages: [{ role: 'user', content: 'Hi' }],
    max_tokens: 3,
    temperature: 0,
    logprobs: true,
    top_logprobs: 2,
    ...ignoreEos,
  });
  const content = chat.choices[0]?.logprobs?.content ?? [];
  assert.equal(content.length, 3);
  for (const entry of content) {
    assert.equal(entry.top_logprobs.length, 2);
    assert.ok(entry.logprob <= 0);
    assert.ok(Array.isArray(entry.bytes));
  }
});

test('models, health, version, and X-Request-Id honoured and echoed', async () => {
  const models = await client.models.list();
  assert.deepEqual(
    models.data.map((m) => m.id),
    ['tiny'],
  );
  assert.equal((await fetch(`${running.url}/health`)).status, 200);
  const version = (await (await fetch(`${running.url}/version`)).json()) as { version: string };
  assert.match(version.version, /^\d+\.\d+\.\d+/);
  const { data, response } = await client.completions
    .create({ model: 'tiny', prompt: 'x', max_tokens: 1 }, { headers: { 'X-Request-Id': 'proxy-req-42' } })
    .withResponse();
  assert.equal(response.headers.get('x-request-id'), 'proxy-req-42');
  assert.equal(data.id, 'cmpl-proxy-req-42');
});
