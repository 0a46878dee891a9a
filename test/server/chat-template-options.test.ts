/**
 * The chat request fields that decide the prompt, through a real server, as vLLM applies
 * them: add_generation_prompt, continue_final_message (not both), a request's own
 * chat_template and chat_template_kwargs (refused unless --trust-request-chat-template),
 * the answer's role (--response-role, or the last message's role without a generation
 * prompt), and the same prompt ids from /v1/chat/completions, /tokenize and the render route.
 * The tiny model's fallback template is `<|role|>\n{content}\n` per message, then
 * `<|assistant|>\n`; its byte tokenizer adds BOS, so the expected ids are written out here.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { postForJson, type Served, serve, stop } from './helpers/served.ts';

setLogLevel('error');

function idsOf(served: Served, text: string): number[] {
  return [served.engine.tokenizer.bosTokenId as number, ...new TextEncoder().encode(text)];
}

interface Chat {
  prompt_token_ids: number[];
  choices: Array<{ message: { role: string; content: string } }>;
}

/** The prompt ids and answer of one greedy chat request, plus /tokenize and /render's ids. */
async function promptViaAllRoutes(
  served: Served,
  body: Record<string, unknown>,
): Promise<{ chat: Chat; tokenize: number[]; render: number[] }> {
  const chat = await postForJson(`${served.url}/v1/chat/completions`, {
    ...body,
    max_tokens: 3,
    temperature: 0,
    return_token_ids: true,
  });
  assert.equal(chat.status, 200, JSON.stringify(chat.json));
  const tok = await postForJson(`${served.url}/tokenize`, body);
  assert.equal(tok.status, 200, JSON.stringify(tok.json));
  const render = await postForJson(`${served.url}/v1/chat/completions/render`, body);
  assert.equal(render.status, 200, JSON.stringify(render.json));
  return {
    chat: chat.json as unknown as Chat,
    tokenize: tok.json['tokens'] as number[],
    render: render.json['token_ids'] as number[],
  };
}

describe('chat template options (untrusted server)', () => {
  let s: Served;
  before(async () => {
    s = await serve({ max_model_len: 256 });
  });
  after(() => stop(s));

  it('add_generation_prompt false drops the assistant header; the answer takes the last role', async () => {
    const messages = [{ role: 'user', content: 'Hi' }];
    const r = await promptViaAllRoutes(s, { messages, add_generation_prompt: false });
    const expected = idsOf(s, '<|user|>\nHi\n');
    assert.deepEqual(r.chat.prompt_token_ids, expected);
    assert.deepEqual(r.tokenize, expected);
    assert.deepEqual(r.render, expected);
    assert.equal(r.chat.choices[0]?.message.role, 'user');
    const plain = await promptViaAllRoutes(s, { messages });
    assert.deepEqual(plain.chat.prompt_token_ids, idsOf(s, '<|user|>\nHi\n<|assistant|>\n'));
    assert.equal(plain.chat.choices[0]?.message.role, 'assistant');
  });

  it('continue_final_message ends the prompt inside the last message; echo prepends it', async () => {
    const messages = [
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'In the beginning' },
    ];
    const body = { messages, add_generation_prompt: false, continue_final_message: true };
    const r = await promptViaAllRoutes(s, body);
    const expected = idsOf(s, '<|user|>\nHi\n<|assistant|>\nIn the beginning');
    assert.deepEqual(r.chat.prompt_token_ids, expected);
    assert.deepEqual(r.tokenize, expected);
    assert.deepEqual(r.render, expected);
    assert.equal(r.chat.choices[0]?.message.role, 'assistant');
    const echoed = await postForJson(`${s.url}/v1/chat/completions`, {
      ...body,
      echo: true,
      max_tokens: 3,
      temperature: 0,
    });
    const answer = (echoed.json as unknown as Chat).choices[0]?.message.content ?? '';
    assert.ok(answer.startsWith('In the beginning'), answer);
    assert.equal(answer, `In the beginning${r.chat.choices[0]?.message.content}`);
  });

  it('refuses both flags, an untrusted template and a malformed kwarg template; keeps serving', async () => {
    const messages = [{ role: 'user', content: 'x' }];
    const both = await postForJson(`${s.url}/v1/chat/completions`, {
      messages,
      continue_final_message: true,
    });
    assert.equal(both.status, 400);
    assert.deepEqual(
      [(both.json['error'] as { message: string }).message, (both.json['error'] as { param: string }).param],
      [
        'Cannot set both `continue_final_message` and `add_generation_prompt` to True.',
        'continue_final_message',
      ],
    );
    const untrusted =
      'Chat template is passed with request, but --trust-request-chat-template is not set. Refused request with untrusted chat template.';
    for (const [body, param] of [
      [{ messages, chat_template: '{{ messages[0].content }}' }, 'chat_template'],
      [{ messages, chat_template_kwargs: { chat_template: '{{ 1 }}' } }, 'chat_template_kwargs'],
    ] as const) {
      for (const route of ['/v1/chat/completions', '/tokenize', '/v1/chat/completions/render']) {
        const r = await postForJson(`${s.url}${route}`, body);
        assert.equal(r.status, 400, route);
        const error = r.json['error'] as { message: string; param: string; code: number };
        assert.deepEqual([error.message, error.param, error.code], [untrusted, param, 400], route);
      }
    }
    const ok = await postForJson(`${s.url}/v1/chat/completions`, { messages, max_tokens: 1 });
    assert.equal(ok.status, 200);
  });
});

describe('chat template options (trusted server, custom response role)', () => {
  let s: Served;
  before(async () => {
    s = await serve({ max_model_len: 256 }, { trustRequestChatTemplate: true, responseRole: 'narrator' });
  });
  after(() => stop(s));

  it("renders the request's template with its kwargs", async () => {
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
    ];
    const chat_template =
      '{% for m in messages %}[{{ m.role }}|{{ style }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[answer]{% endif %}';
    const r = await promptViaAllRoutes(s, {
      messages,
      chat_template,
      chat_template_kwargs: { style: 'kjv' },
    });
    const expected = idsOf(s, '[system|kjv] Be brief.\n[user|kjv] Hi\n[answer]');
    assert.deepEqual(r.chat.prompt_token_ids, expected);
    assert.deepEqual(r.tokenize, expected);
    assert.deepEqual(r.render, expected);
    assert.equal(r.chat.choices[0]?.message.role, 'narrator');
  });

  it('a template that drops the final message cannot be continued: 400 naming the field', async () => {
    const r = await postForJson(`${s.url}/v1/chat/completions`, {
      messages: [
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: 'Verily' },
      ],
      chat_template: '{% for m in messages %}{{ m.role }};{% endfor %}',
      add_generation_prompt: false,
      continue_final_message: true,
    });
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.equal((r.json['error'] as { param: string }).param, 'continue_final_message');
  });
});
