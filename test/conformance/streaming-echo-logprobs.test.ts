/**
 * Conformance with vLLM's OpenAI server (vllm/entrypoints/openai/completion/serving.py and
 * chat_completion/serving.py), over a real socket: when chat streams send the role chunk,
 * echo with logprobs (prompt logprobs, the first null), echo with max_tokens 0 (lm-eval's
 * loglikelihood path), text_offset, `logprobs: 0` and `prompt_logprobs`.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { AsyncEngineLike, GenerateRequest, RequestOutputDelta } from '../../src/engine/api.ts';
import { postJson, type Running, startEngine, startServer } from '../server/helpers/harness.ts';

let engine: AsyncEngineLike;
let running: Running;
/** While set, every request's first delta waits for it: the "prefill" takes as long as the test wants. */
let gate: Promise<void> | null = null;

before(async () => {
  engine = await startEngine();
  const gated: AsyncEngineLike = Object.create(engine, {
    generate: {
      value: async function* (
        request: GenerateRequest,
        signal?: AbortSignal,
      ): AsyncIterable<RequestOutputDelta> {
        let first = true;
        for await (const delta of engine.generate(request, signal)) {
          if (first && gate) await gate;
          first = false;
          yield delta;
        }
      },
    },
  });
  running = await startServer({ engine: gated });
});

after(async () => {
  await running?.close();
  await engine?.shutdown();
});

interface CompletionLp {
  tokens: string[];
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[];
  text_offset: number[];
}
interface Completion {
  choices: { text: string; logprobs: CompletionLp | null; finish_reason: string; prompt_logprobs: unknown }[];
  usage: { prompt_tokens: number; completion_tokens: number };
}

async function complete(body: Record<string, unknown>): Promise<Completion> {
  const res = await postJson(`${running.url}/v1/completions`, { temperature: 0, ignore_eos: true, ...body });
  assert.equal(res.status, 200, await res.clone().text());
  return (await res.json()) as Completion;
}

async function sse(path: string, body: Record<string, unknown>): Promise<Record<string, unknown>[]> {
  const res = await postJson(`${running.url}${path}`, {
    temperature: 0,
    ignore_eos: true,
    stream: true,
    ...body,
  });
  assert.equal(res.status, 200);
  const text = await res.text();
  return text
    .split('\n\n')
    .filter((l) => l.startsWith('data: {'))
    .map((l) => JSON.parse(l.slice(6)) as Record<string, unknown>);
}

const PROMPT = 'The quick brown fox jumps';

test('chat streams send the role chunk with the first token, not before prefill (TTFT includes prefill)', async () => {
  let release!: () => void;
  gate = new Promise((r) => {
    release = r;
  });
  try {
    const res = await postJson(`${running.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 2,
      stream: true,
      n: 2,
    });
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    const pending = reader.read();
    const early = await Promise.race([pending, new Promise((r) => setTimeout(() => r('nothing'), 300))]);
    assert.equal(early, 'nothing', 'no chunk before the engine produced its first token');
    release();
    let text = '';
    for (let next = await pending; !next.done; next = await reader.read())
      text += Buffer.from(next.value).toString();
    const chunks = text
      .split('\n\n')
      .filter((l) => l.startsWith('data: {'))
      .map((l) => JSON.parse(l.slice(6)) as { choices: { index: number; delta: Record<string, unknown> }[] });
    assert.deepEqual(
      chunks.slice(0, 2).map((c) => [c.choices[0]?.index, c.choices[0]?.delta]),
      [
        [0, { role: 'assistant', content: '' }],
        [1, { role: 'assistant', content: '' }],
      ],
      'one role chunk per choice, first',
    );
    assert.ok(
      chunks.slice(2).every((c) => c.choices.length === 0 || !('role' in (c.choices[0]?.delta ?? {}))),
    );
  } finally {
    gate = null;
  }
});

test('echo + logprobs: prompt tokens with their logprobs (first null), then the generated ones', async () => {
  const plain = await complete({ prompt: PROMPT, max_tokens: 3, logprobs: 2 });
  const scored = await complete({ prompt: PROMPT, max_tokens: 3, prompt_logprobs: 2 });
  const echo = await complete({ prompt: PROMPT, max_tokens: 3, logprobs: 2, echo: true });
  const promptIds = engine.tokenizer.encode(PROMPT);
  const lp = echo.choices[0]!.logprobs!;
  const gen = plain.choices[0]!.logprobs!;
  assert.equal(echo.choices[0]!.text, PROMPT + plain.choices[0]!.text);
  assert.equal(lp.tokens.length, promptIds.length + 3);
  assert.equal(lp.token_logprobs[0], null, 'nothing precedes the first prompt token');
  assert.equal(lp.top_logprobs[0], null);
  assert.deepEqual(lp.tokens.slice(promptIds.length), gen.tokens);
  assert.deepEqual(lp.token_logprobs.slice(promptIds.length), gen.token_logprobs);
  // The prompt's part equals what prompt_logprobs reports for the same tokens.
  const field = scored.choices[0]!.prompt_logprobs as (Record<
    string,
    { logprob: number; rank: number }
  > | null)[];
  assert.equal(field.length, promptIds.length);
  assert.equal(field[0], null);
  for (let k = 1; k < promptIds.length; k++) {
    const own = field[k]![String(promptIds[k])]!;
    assert.equal(lp.token_logprobs[k], own.logprob, `position ${k}`);
    assert.ok(own.rank >= 1);
    assert.ok(Object.keys(lp.top_logprobs[k]!).length <= 3, 'the token plus the top 2');
  }
  // text_offset: 0 first, each next one advanced by the previous token's length (code points).
  for (const [i, o] of lp.text_offset.entries())
    assert.equal(o, i === 0 ? 0 : lp.text_offset[i - 1]! + [...lp.tokens[i - 1]!].length);
  assert.equal(plain.choices[0]!.prompt_logprobs, null, 'no prompt logprobs unless asked');
});

test("echo with max_tokens 0 returns the prompt and its logprobs (lm-eval's loglikelihood request)", async () => {
  const promptIds = engine.tokenizer.encode(PROMPT);
  const r = await complete({ prompt: PROMPT, max_tokens: 0, logprobs: 1, echo: true });
  const c = r.choices[0]!;
  assert.equal(c.text, PROMPT);
  assert.equal(c.logprobs!.tokens.length, promptIds.length);
  assert.equal(c.logprobs!.token_logprobs[0], null);
  // lm-eval sums the continuation's token_logprobs: they must be real values, not 0.
  const continuation = c.logprobs!.token_logprobs.slice(-3) as number[];
  assert.ok(continuation.every((v) => typeof v === 'number' && v < 0));
  assert.equal(c.finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 1, 'vLLM generates (and counts) one token it does not show');
  // Same prompt logprobs as with a generation after them.
  const longer = await complete({ prompt: PROMPT, max_tokens: 2, logprobs: 1, echo: true });
  assert.deepEqual(
    longer.choices[0]!.logprobs!.token_logprobs.slice(0, promptIds.length),
    c.logprobs!.token_logprobs,
  );
  // Without echo, max_tokens 0 stays a 400 as in vLLM.
  const bad = await postJson(`${running.url}/v1/completions`, { prompt: PROMPT, max_tokens: 0 });
  assert.equal(bad.status, 400);
});

test('logprobs: 0 returns the sampled token alone in top_logprobs', async () => {
  const r = await complete({ prompt: PROMPT, max_tokens: 4, logprobs: 0 });
  const lp = r.choices[0]!.logprobs!;
  lp.top_logprobs.forEach((top, i) => {
    assert.deepEqual(Object.keys(top!), [lp.tokens[i]]);
    assert.equal(top![lp.tokens[i]!], lp.token_logprobs[i]);
  });
});

test('streamed echo: the prompt and its logprobs ride on the first chunk; text_offset continues the streamed text', async () => {
  const promptIds = engine.tokenizer.encode(PROMPT);
  const chunks = (await sse('/v1/completions', {
    prompt: PROMPT,
    max_tokens: 3,
    logprobs: 1,
    echo: true,
  })) as {
    choices: { text: string; logprobs: CompletionLp }[];
  }[];
  const full = await complete({ prompt: PROMPT, max_tokens: 3, logprobs: 1, echo: true });
  const first = chunks[0]!.choices[0]!;
  assert.ok(first.text.startsWith(PROMPT));
  assert.equal(first.logprobs.token_logprobs[0], null);
  assert.equal(first.logprobs.tokens.length, promptIds.length + 1);
  const text = chunks.map((c) => c.choices[0]?.text ?? '').join('');
  assert.equal(text, full.choices[0]!.text);
  let streamed = 0;
  for (const c of chunks) {
    const choice = c.choices[0];
    if (!choice) continue;
    assert.equal(choice.logprobs.text_offset[0], streamed, 'each chunk starts at the text streamed so far');
    streamed += [...choice.text].length;
  }
  const res = await postJson(`${running.url}/v1/completions`, {
    prompt: PROMPT,
    stream: true,
    prompt_logprobs: 1,
  });
  assert.equal(res.status, 400, 'prompt_logprobs with stream is a 400, as vLLM');
});

test('chat prompt_logprobs: top-level prompt_logprobs, first null, one entry per prompt token', async () => {
  const res = await postJson(`${running.url}/v1/chat/completions`, {
    messages: [{ role: 'user', content: 'Hi there' }],
    max_tokens: 2,
    temperature: 0,
    prompt_logprobs: 0,
  });
  assert.equal(res.status, 200);
  const body = (await res.json()) as {
    prompt_logprobs: (Record<string, { logprob: number; rank: number; decoded_token: string }> | null)[];
    usage: { prompt_tokens: number };
  };
  assert.equal(body.prompt_logprobs.length, body.usage.prompt_tokens);
  assert.equal(body.prompt_logprobs[0], null);
  for (const entry of body.prompt_logprobs.slice(1)) {
    const values = Object.values(entry!);
    assert.ok(
      values.length === 1 || values.length === 2,
      'the prompt token (and the top 1 when it is not on top)',
    );
    for (const v of values) assert.ok(v.logprob <= 0 && v.rank >= 1 && typeof v.decoded_token === 'string');
  }
});
