/**
 * Conformance with vLLM's request fields (vllm/sampling_params.py and the request models of
 * vllm/entrypoints/openai/), over a real socket: the fields vLLM applies change the output
 * as vLLM's do, the ones it refuses are 400s with its message and `param`, values are
 * coerced as pydantic does, and the response shapes (stop_reason, error body, usage
 * details, token ids) are vLLM's.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { postJson, servedForTests } from '../server/helpers/harness.ts';

const served = servedForTests({ enablePromptTokensDetails: true });

interface Choice {
  text: string;
  finish_reason: string;
  stop_reason: string | number | null;
  token_ids?: number[];
  prompt_token_ids?: number[];
  logprobs: { tokens: string[]; top_logprobs: Record<string, number>[] } | null;
}
interface Completion {
  choices: Choice[];
  usage: {
    prompt_tokens: number;
    completion_tokens: number;
    prompt_tokens_details?: { cached_tokens: number };
  };
}

const PROMPT = 'In the beginning God created';

async function complete(body: Record<string, unknown>): Promise<Completion> {
  const res = await postJson(`${served.url}/v1/completions`, { prompt: PROMPT, temperature: 0, ...body });
  assert.equal(res.status, 200, await res.clone().text());
  return (await res.json()) as Completion;
}

async function ids(body: Record<string, unknown>): Promise<number[]> {
  return (await complete({ ...body, return_token_ids: true })).choices[0]!.token_ids!;
}

async function refused(
  path: string,
  body: Record<string, unknown>,
  param: string,
  message?: RegExp,
): Promise<void> {
  const res = await postJson(`${served.url}${path}`, body);
  const text = await res.text();
  assert.equal(res.status, 400, `${param}: ${text}`);
  const error = (
    JSON.parse(text) as { error: { code: number; param: string; message: string; kvconnect_code: string } }
  ).error;
  assert.equal(error.code, 400, "vLLM's ErrorInfo.code is the HTTP status");
  assert.equal(error.param, param);
  assert.equal(typeof error.kvconnect_code, 'string');
  if (message) assert.match(error.message, message);
}

test('return_token_ids: prompt_token_ids and token_ids in the choice', async () => {
  const r = await complete({ max_tokens: 4, ignore_eos: true, return_token_ids: true });
  assert.deepEqual(r.choices[0]!.prompt_token_ids, served.engine.tokenizer.encode(PROMPT));
  assert.equal(r.choices[0]!.token_ids!.length, 4);
});

test('min_tokens holds EOS and stop tokens back until that many tokens exist', async () => {
  const free = await ids({ max_tokens: 8 });
  const stopId = free[1]!;
  const stopped = await complete({ max_tokens: 8, stop_token_ids: [stopId], return_token_ids: true });
  assert.equal(stopped.choices[0]!.finish_reason, 'stop');
  assert.equal(stopped.choices[0]!.stop_reason, stopId, 'stop_reason is the stop token id');
  const held = await ids({ max_tokens: 8, stop_token_ids: [stopId], min_tokens: 5 });
  assert.ok(held.length >= 5, `min_tokens 5 produced ${held.length} tokens`);
  assert.ok(!held.slice(0, 4).includes(stopId), 'the stop token cannot be sampled before min_tokens');
  await refused(
    '/v1/completions',
    { prompt: 'x', max_tokens: 2, min_tokens: 3 },
    'min_tokens',
    /min_tokens must be less than or equal to max_tokens=2, got 3/,
  );
});

test('stop_reason is the matched stop string', async () => {
  const free = await complete({ max_tokens: 12, ignore_eos: true });
  const stop = free.choices[0]!.text.slice(3, 5);
  const r = await complete({ max_tokens: 12, ignore_eos: true, stop: [stop] });
  assert.equal(r.choices[0]!.finish_reason, 'stop');
  assert.equal(r.choices[0]!.stop_reason, stop);
  assert.equal(free.choices[0]!.stop_reason, null, 'a length finish has no stop_reason');
});

test('logit_bias, allowed_token_ids and bad_words steer greedy sampling; out-of-vocab ids are 400s', async () => {
  const forced = await ids({ max_tokens: 3, ignore_eos: true, logit_bias: { '65': 100 } });
  assert.deepEqual(forced, [65, 65, 65]);
  const allowed = await ids({ max_tokens: 4, ignore_eos: true, allowed_token_ids: [66, 67] });
  assert.ok(
    allowed.every((t) => t === 66 || t === 67),
    `${allowed}`,
  );
  const words = await ids({ max_tokens: 8, ignore_eos: true });
  const ascii = words.find((t) => t > 32 && t < 127);
  assert.ok(ascii !== undefined, `an ASCII token among ${words}`);
  const noBad = await ids({
    max_tokens: 8,
    ignore_eos: true,
    bad_words: [served.engine.tokenizer.decode([ascii])],
  });
  assert.ok(!noBad.includes(ascii), `bad word ${ascii} never sampled: ${noBad}`);
  assert.notDeepEqual(noBad, words);
  const vocab = served.engine.tokenizer.vocabSize;
  await refused(
    '/v1/completions',
    { prompt: 'x', logit_bias: { [vocab]: 1 } },
    'logit_bias',
    /out-of-vocab token ids/,
  );
  await refused(
    '/v1/completions',
    { prompt: 'x', allowed_token_ids: [] },
    'allowed_token_ids',
    /allowed_token_ids is not None and empty!/,
  );
});

test('repetition, frequency and presence penalties change a repetitive greedy output; logprobs stay raw', async () => {
  const base = await complete({ max_tokens: 16, ignore_eos: true, logprobs: 0, return_token_ids: true });
  const baseIds = base.choices[0]!.token_ids!;
  assert.ok(new Set(baseIds).size < baseIds.length, 'the tiny model repeats itself');
  for (const penalty of [{ repetition_penalty: 2 }, { frequency_penalty: 2 }, { presence_penalty: 2 }]) {
    const got = await ids({ max_tokens: 16, ignore_eos: true, ...penalty });
    assert.notDeepEqual(got, baseIds, JSON.stringify(penalty));
  }
  await refused('/v1/completions', { prompt: 'x', presence_penalty: 3 }, 'presence_penalty');
  await refused('/v1/completions', { prompt: 'x', repetition_penalty: 0 }, 'repetition_penalty');
});

test('truncate_prompt_tokens keeps the last N prompt tokens', async () => {
  const r = await complete({ max_tokens: 1, truncate_prompt_tokens: 4, return_token_ids: true });
  assert.deepEqual(r.choices[0]!.prompt_token_ids, served.engine.tokenizer.encode(PROMPT).slice(-4));
  assert.equal(r.usage.prompt_tokens, 4);
  await refused(
    '/v1/completions',
    { prompt: 'x', truncate_prompt_tokens: 10_000 },
    'truncate_prompt_tokens',
    /is greater than max_model_len/,
  );
});

test('usage.prompt_tokens_details.cached_tokens with --enable-prompt-tokens-details', async () => {
  const prompt = 'Cached prefix: the same words again and again, long enough for two full blocks.';
  await complete({ prompt, max_tokens: 1 });
  const again = await complete({ prompt, max_tokens: 1 });
  assert.ok((again.usage.prompt_tokens_details?.cached_tokens ?? 0) >= 16);
});

test('stream_options.continuous_usage_stats: usage on every chunk', async () => {
  const res = await postJson(`${served.url}/v1/completions`, {
    prompt: PROMPT,
    max_tokens: 3,
    ignore_eos: true,
    stream: true,
    stream_options: { include_usage: true, continuous_usage_stats: true },
  });
  const chunks = (await res.text())
    .split('\n\n')
    .filter((l) => l.startsWith('data: {'))
    .map((l) => JSON.parse(l.slice(6)) as { choices: unknown[]; usage?: { completion_tokens: number } });
  const withChoice = chunks.filter((c) => c.choices.length > 0);
  assert.deepEqual(
    withChoice.map((c) => c.usage?.completion_tokens),
    withChoice.map((_, i) => i + 1),
  );
});

test("vLLM's 400s: suffix, stream_options without stream, seed outside int64, auto tool choice, structured outputs", async () => {
  await refused(
    '/v1/completions',
    { prompt: 'x', suffix: 'y' },
    'suffix',
    /suffix is not currently supported/,
  );
  await refused(
    '/v1/completions',
    { prompt: 'x', stream_options: { include_usage: true } },
    'stream_options',
    /Stream options can only be defined when `stream=True`/,
  );
  await refused('/v1/completions', { prompt: 'x', seed: 2 ** 63 }, 'seed');
  await refused('/v1/completions', { prompt: 'x', seed: -(2 ** 64) }, 'seed');
  const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }];
  const messages = [{ role: 'user', content: 'hi' }];
  await refused(
    '/v1/chat/completions',
    { messages, tools },
    'tool_choice',
    /"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set/,
  );
  await refused('/v1/chat/completions', { messages, tools, tool_choice: 'auto' }, 'tool_choice');
  await refused(
    '/v1/chat/completions',
    { messages, response_format: { type: 'json_schema', json_schema: { name: 'x' } } },
    'response_format.json_schema.schema',
  );
  await refused(
    '/v1/completions',
    { prompt: 'x', structured_outputs: {} },
    'structured_outputs',
    /You must use one kind of structured outputs constraint but none are specified/,
  );
  await refused(
    '/v1/completions',
    { prompt: 'x', structured_outputs: { regex: 'a', choice: ['a'] } },
    'structured_outputs',
    /You can only use one kind of constraints for structured outputs/,
  );
  await refused('/v1/completions', { prompt: 'x', use_beam_search: true, n: 11 }, 'n');
  await refused('/v1/chat/completions', { messages, continue_final_message: true }, 'continue_final_message');
  const none = await postJson(`${served.url}/v1/chat/completions`, {
    messages,
    tools,
    tool_choice: 'none',
    max_tokens: 1,
  });
  assert.equal(none.status, 200, 'tool_choice none answers in text');
  await none.text();
});

test('pydantic-style coercion: numeric strings and "true"/"false"', async () => {
  const coerced = await complete({
    max_tokens: '3',
    temperature: '0',
    ignore_eos: 'true',
    return_token_ids: 'yes',
  });
  assert.equal(coerced.choices[0]!.token_ids!.length, 3);
  await refused('/v1/completions', { prompt: 'x', max_tokens: 'three' }, 'max_tokens');
});

test('chat echo prepends the final assistant message', async () => {
  const messages = [
    { role: 'user', content: 'Say something' },
    { role: 'assistant', content: 'Well, ' },
  ];
  const plain = await postJson(`${served.url}/v1/chat/completions`, {
    messages,
    max_tokens: 3,
    temperature: 0,
  });
  const echoed = await postJson(`${served.url}/v1/chat/completions`, {
    messages,
    max_tokens: 3,
    temperature: 0,
    echo: true,
  });
  const content = async (r: Response) =>
    ((await r.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content;
  assert.equal(await content(echoed), `Well, ${await content(plain)}`);
});
