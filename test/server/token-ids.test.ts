/**
 * vLLM's `return_tokens_as_token_ids`: logprobs name each token `token_id:{id}` (completions
 * and chat, streaming and not, chosen and top tokens), the ids are the ones the engine
 * generated, everything else in the response is unchanged, and a bad value is a 400.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { AsyncEngineLike, RequestOutputDelta } from '../../src/engine/api.ts';
import { samplingParams } from '../../src/engine/sampling-params.ts';
import { completionLogprobs, sampledEntries, tokenIdLabel } from '../../src/server/logprobs-format.ts';
import { postJson, type Running, startEngine, startServer } from './helpers/harness.ts';

let engine: AsyncEngineLike;
let running: Running;

before(async () => {
  engine = await startEngine();
  running = await startServer({ engine });
});

after(async () => {
  await running?.close();
  await engine?.shutdown();
});

const PROMPT = 'The quick brown fox';
const MAX_TOKENS = 6;

interface CompletionLp {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Array<Record<string, number>>;
  text_offset: number[];
}

interface CompletionBody {
  choices: Array<{ text: string; logprobs: CompletionLp | null }>;
}

function idOf(label: string): number {
  const match = /^token_id:(\d+)$/.exec(label);
  assert.ok(match, `"${label}" is not token_id:{id}`);
  return Number(match[1]);
}

/** The ids the engine itself generates for PROMPT (greedy), without HTTP. */
async function engineTokenIds(): Promise<number[]> {
  const ids: number[] = [];
  const request = {
    requestId: `direct-${Math.random()}`,
    promptTokenIds: engine.tokenizer.encode(PROMPT),
    sampling: samplingParams({ maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }),
  };
  for await (const delta of engine.generate(request)) ids.push(...delta.newTokenIds);
  return ids;
}

/** POSTs a greedy completion of PROMPT with `extra` fields; expects 200. */
async function postCompletion(extra: Record<string, unknown>): Promise<Response> {
  const res = await postJson(`${running.url}/v1/completions`, {
    model: 'tiny',
    prompt: PROMPT,
    max_tokens: MAX_TOKENS,
    temperature: 0,
    ignore_eos: true,
    ...extra,
  });
  assert.equal(res.status, 200);
  return res;
}

async function complete(extra: Record<string, unknown>): Promise<CompletionBody> {
  return (await (await postCompletion(extra)).json()) as CompletionBody;
}

test('completions: tokens and top-logprob keys are token_id:{id} with the generated ids; text and logprobs unchanged', async () => {
  const expected = await engineTokenIds();
  const plain = await complete({ logprobs: 2 });
  const byId = await complete({ logprobs: 2, return_tokens_as_token_ids: true });
  const plainLp = plain.choices[0]?.logprobs;
  const idLp = byId.choices[0]?.logprobs;
  assert.ok(plainLp && idLp);

  assert.deepEqual(idLp.tokens.map(idOf), expected);
  assert.deepEqual(
    expected.map((id) => engine.tokenizer.decode([id])),
    plainLp.tokens,
    'the plain response names the same tokens by text',
  );
  assert.equal(byId.choices[0]?.text, plain.choices[0]?.text);
  assert.deepEqual(idLp.token_logprobs, plainLp.token_logprobs);
  // vLLM advances text_offset by the length of each token as named, so labels move it too.
  let at = 0;
  assert.deepEqual(
    idLp.text_offset,
    idLp.tokens.map((t) => {
      const here = at;
      at += [...t].length;
      return here;
    }),
  );
  for (const [i, top] of idLp.top_logprobs.entries()) {
    const keys = Object.keys(top);
    assert.ok(keys.length >= 1 && keys.length <= 2);
    assert.equal(
      top[tokenIdLabel(expected[i] ?? -1)],
      idLp.token_logprobs[i],
      'greedy: the chosen id is on top',
    );
    for (const key of keys) {
      const text = engine.tokenizer.decode([idOf(key)]);
      assert.ok((plainLp.top_logprobs[i]?.[text] ?? Number.NaN) >= (top[key] ?? 0));
    }
  }
});

test('completions, streaming: the chunks carry the same token_id labels', async () => {
  const full = await complete({ logprobs: 0, return_tokens_as_token_ids: true });
  const res = await postCompletion({ logprobs: 0, return_tokens_as_token_ids: true, stream: true });
  const labels: string[] = [];
  for (const line of (await res.text()).split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const chunk = JSON.parse(line.slice(6)) as CompletionBody;
    labels.push(...(chunk.choices[0]?.logprobs?.tokens ?? []));
  }
  assert.equal(labels.length, MAX_TOKENS);
  assert.deepEqual(labels, full.choices[0]?.logprobs?.tokens);
});

test('chat: content entries and their top_logprobs are token_id:{id}, bytes are the label’s', async () => {
  const res = await postJson(`${running.url}/v1/chat/completions`, {
    model: 'tiny',
    messages: [{ role: 'user', content: 'Hi' }],
    max_tokens: 3,
    temperature: 0,
    ignore_eos: true,
    logprobs: true,
    top_logprobs: 2,
    return_tokens_as_token_ids: true,
  });
  assert.equal(res.status, 200);
  const body = (await res.json()) as {
    choices: Array<{
      logprobs: {
        content: Array<{
          token: string;
          logprob: number;
          bytes: number[];
          top_logprobs: Array<{ token: string; logprob: number; bytes: number[] }>;
        }>;
      };
    }>;
  };
  const content = body.choices[0]?.logprobs.content ?? [];
  assert.equal(content.length, 3);
  for (const entry of content) {
    idOf(entry.token);
    assert.deepEqual(entry.bytes, [...Buffer.from(entry.token, 'utf8')]);
    assert.equal(entry.top_logprobs.length, 2);
    for (const top of entry.top_logprobs) idOf(top.token);
    assert.equal(entry.top_logprobs[0]?.token, entry.token, 'greedy: the chosen id is the most likely');
  }
});

test('without logprobs the option changes nothing; a non-boolean value is a 400 naming it', async () => {
  const plain = await complete({});
  const flagged = await complete({ return_tokens_as_token_ids: true });
  assert.equal(flagged.choices[0]?.logprobs, null);
  assert.equal(flagged.choices[0]?.text, plain.choices[0]?.text);

  const res = await postJson(`${running.url}/v1/completions`, {
    model: 'tiny',
    prompt: PROMPT,
    logprobs: 1,
    return_tokens_as_token_ids: 'sometimes',
  });
  assert.equal(res.status, 400);
  const err = (await res.json()) as { error: { param: string; message: string } };
  assert.equal(err.error.param, 'return_tokens_as_token_ids');
});

test('ids tell apart tokens whose text is the same (bytes the tokenizer decodes to U+FFFD)', () => {
  const tokenizer = engine.tokenizer;
  const replacement: number[] = [];
  for (let id = 0; id < tokenizer.vocabSize && replacement.length < 2; id++) {
    if (tokenizer.decode([id]) === '\uFFFD') replacement.push(id);
  }
  assert.equal(replacement.length, 2, 'the tiny tokenizer has several ids that decode to U+FFFD');
  const delta = (id: number): RequestOutputDelta => ({
    requestId: 'r',
    newTokenIds: [id],
    newText: tokenizer.decode([id]),
    logprobs: [-1],
    topLogprobs: [[{ tokenId: id, logprob: -1 }]],
    finished: false,
    finishReason: null,
    kvTransferParams: null,
    metrics: { arrivalTime: 0 } as RequestOutputDelta['metrics'],
  });
  const [a, b] = replacement.map((id) => delta(id)) as [RequestOutputDelta, RequestOutputDelta];
  const lp = (d: RequestOutputDelta, asIds: boolean) =>
    completionLogprobs(tokenizer, d.newTokenIds, sampledEntries(d), 1, 0, asIds);
  assert.deepEqual(lp(a, false).tokens, lp(b, false).tokens);
  assert.notDeepEqual(lp(a, true).tokens, lp(b, true).tokens);
});

// vLLM's `return_token_ids`: the ids themselves, in the response and in every streamed chunk.

type IdsChoice = { token_ids?: number[]; prompt_token_ids?: number[] | null; text?: string };
type IdsEvent = { prompt_token_ids?: number[]; choices: IdsChoice[] };

function events(raw: string): IdsEvent[] {
  return raw
    .split('\n')
    .filter((l) => l.startsWith('data: {'))
    .map((l) => JSON.parse(l.slice(6)) as IdsEvent);
}

test('return_token_ids, completions: prompt and generated ids, whole and per chunk', async () => {
  const want = await engineTokenIds();
  const promptIds = engine.tokenizer.encode(PROMPT);
  const whole = (await (await postCompletion({ return_token_ids: true })).json()) as IdsEvent;
  assert.deepEqual(whole.choices[0]!.token_ids, want);
  assert.deepEqual(whole.choices[0]!.prompt_token_ids, promptIds);
  const streamed = events(await (await postCompletion({ return_token_ids: true, stream: true })).text());
  assert.deepEqual(
    streamed.flatMap((e) => e.choices[0]?.token_ids ?? []),
    want,
    'the chunks carry every generated id, in order',
  );
  assert.deepEqual(streamed[0]!.choices[0]!.prompt_token_ids, promptIds);
  assert.ok(streamed.slice(1).every((e) => e.choices[0]!.prompt_token_ids === null));
  const plain = await (await postCompletion({ stream: true })).text();
  assert.doesNotMatch(plain, /token_ids/, 'absent unless asked for');
});

test('return_token_ids, chat: the chat template rendering as prompt ids, on the role chunk', async () => {
  const messages = [{ role: 'user', content: PROMPT }];
  const tokenized = (await (await postJson(`${running.url}/tokenize`, { messages })).json()) as {
    tokens: number[];
  };
  const body = { messages, max_tokens: MAX_TOKENS, temperature: 0, ignore_eos: true, return_token_ids: true };
  const whole = (await (await postJson(`${running.url}/v1/chat/completions`, body)).json()) as IdsEvent;
  assert.deepEqual(whole.prompt_token_ids, tokenized.tokens);
  assert.equal(whole.choices[0]!.token_ids?.length, MAX_TOKENS);
  const res = await postJson(`${running.url}/v1/chat/completions`, { ...body, stream: true });
  const streamed = events(await res.text());
  assert.deepEqual(streamed[0]!.prompt_token_ids, tokenized.tokens, 'the role chunk carries the prompt ids');
  assert.deepEqual(
    streamed.flatMap((e) => e.choices[0]?.token_ids ?? []),
    whole.choices[0]!.token_ids,
  );
});
