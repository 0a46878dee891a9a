/**
 * Conformance with the routes routers and platforms call on vLLM, over a real socket:
 * SageMaker's /ping and /invocations, /load, /version, and the render endpoints llm-d's
 * precise prefix-cache scorer gets token ids from.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { postJson, servedForTests } from '../server/helpers/harness.ts';

const served = servedForTests();

const messages = [{ role: 'user', content: 'Hello there' }];

test('/ping answers 200 to GET and POST', async () => {
  for (const method of ['GET', 'POST']) {
    const res = await fetch(`${served.url}/ping`, { method });
    assert.equal(res.status, 200, method);
    await res.text();
  }
});

interface Answer {
  object: string;
  choices: { token_ids: number[] }[];
}
const answer = async (path: string, body: unknown): Promise<Answer> =>
  (await (await postJson(`${served.url}${path}`, body)).json()) as Answer;

test('/invocations dispatches on the body: messages → chat, prompt → completions', async () => {
  const greedy = { max_tokens: 4, temperature: 0, ignore_eos: true, return_token_ids: true };
  const viaChat = await answer('/v1/chat/completions', { messages, ...greedy });
  const invChat = await answer('/invocations', { messages, ...greedy });
  assert.equal(invChat.object, 'chat.completion');
  assert.deepEqual(invChat.choices[0]?.token_ids, viaChat.choices[0]?.token_ids);
  const viaCmpl = await answer('/v1/completions', { prompt: 'The', ...greedy });
  const invCmpl = await answer('/invocations', { prompt: 'The', ...greedy });
  assert.equal(invCmpl.object, 'text_completion');
  assert.deepEqual(invCmpl.choices[0]?.token_ids, viaCmpl.choices[0]?.token_ids);
  const bad = await postJson(`${served.url}/invocations`, { input: 'x' });
  assert.equal(bad.status, 400);
  assert.equal(((await bad.json()) as { error: { param: string } }).error.param, 'body');
});

test('/load counts the requests in flight', async () => {
  assert.deepEqual(await (await fetch(`${served.url}/load`)).json(), { server_load: 0 });
  const res = await postJson(`${served.url}/v1/completions`, {
    prompt: 'x',
    max_tokens: 200,
    ignore_eos: true,
    stream: true,
  });
  const reader = res.body!.getReader();
  await reader.read();
  const during = (await (await fetch(`${served.url}/load`)).json()) as { server_load: number };
  assert.equal(during.server_load, 1);
  await reader.cancel();
});

test('/version: the vLLM version followed, and kvconnect’s own', async () => {
  const v = (await (await fetch(`${served.url}/version`)).json()) as {
    version: string;
    kvconnect_version: string;
  };
  assert.match(v.version, /^\d+\.\d+\.\d+$/);
  assert.match(v.kvconnect_version, /^\d+\.\d+\.\d+/);
});

test('render endpoints return the token ids the generation routes would run', async () => {
  const cmpl = (await (
    await postJson(`${served.url}/v1/completions/render`, { prompt: ['one', 'two three'], max_tokens: 3 })
  ).json()) as {
    token_ids: number[];
    request_id: string;
    model: string;
    sampling_params: { max_tokens: number };
  }[];
  assert.equal(cmpl.length, 2);
  assert.deepEqual(cmpl[0]!.token_ids, served.engine.tokenizer.encode('one'));
  assert.deepEqual(cmpl[1]!.token_ids, served.engine.tokenizer.encode('two three'));
  assert.match(cmpl[0]!.request_id, /^cmpl-/);
  assert.equal(cmpl[0]!.model, 'tiny');
  assert.equal(cmpl[0]!.sampling_params.max_tokens, 3);
  const truncated = (await (
    await postJson(`${served.url}/v1/completions/render`, {
      prompt: 'one two three',
      truncate_prompt_tokens: 2,
    })
  ).json()) as {
    token_ids: number[];
  }[];
  assert.deepEqual(truncated[0]!.token_ids, served.engine.tokenizer.encode('one two three').slice(-2));
  const chat = (await (
    await postJson(`${served.url}/v1/chat/completions/render`, { messages, cache_salt: 's' })
  ).json()) as {
    token_ids: number[];
    cache_salt: string;
  };
  const tokenized = (await (await postJson(`${served.url}/tokenize`, { messages })).json()) as {
    tokens: number[];
  };
  assert.deepEqual(chat.token_ids, tokenized.tokens);
  assert.equal(chat.cache_salt, 's');
  const usage = (await (
    await postJson(`${served.url}/v1/chat/completions`, { messages, max_tokens: 1 })
  ).json()) as {
    usage: { prompt_tokens: number };
  };
  assert.equal(usage.usage.prompt_tokens, chat.token_ids.length);
  assert.equal(
    (await postJson(`${served.url}/v1/completions/render`, { prompt: 'x', model: 'other' })).status,
    404,
  );
  assert.equal(
    (await postJson(`${served.url}/v1/completions/render`, { prompt: 'x', suffix: 'y' })).status,
    400,
  );
});
