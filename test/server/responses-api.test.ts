/**
 * POST /v1/responses for text through real servers and the official `openai` client: the
 * answer is the chat completion of the same messages (instructions as the system message),
 * in a Response object; streamed, the Responses API's named events in order with sequence
 * numbers from 0 and deltas that add up to the final text; `incomplete` at
 * max_output_tokens; the fields needing a response store or a parser kvconnect lacks are
 * 400s naming them; prefill/decode through it with kv_transfer_params. Text is compared
 * between two routes of one engine (both decode the same token ids); the token counts are
 * compared too.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { setLogLevel } from '../../src/logging/logger.ts';
import { postForJson, type Served, serve, servePdTrio, stop } from './helpers/served.ts';

setLogLevel('error');

interface Chat {
  choices: Array<{ message: { content: string } }>;
  usage: { prompt_tokens: number; completion_tokens: number };
}

const instructions = 'Answer as the King James Bible would.';
const input = 'And God said, Let there be light';

describe('POST /v1/responses', () => {
  let s: Served;
  let client: OpenAI;
  let chat: Chat;
  before(async () => {
    s = await serve({ max_model_len: 256, num_gpu_blocks: 64 });
    client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    chat = (
      await postForJson(`${s.url}/v1/chat/completions`, {
        messages: [
          { role: 'system', content: instructions },
          { role: 'user', content: input },
        ],
        max_tokens: 12,
        temperature: 0,
        ignore_eos: true,
      })
    ).json as unknown as Chat;
  });
  after(() => stop(s));

  it('answers as the chat completion of the same messages, in a Response object', async () => {
    const response = await client.responses.create({
      model: 'tiny',
      instructions,
      input,
      max_output_tokens: 12,
      temperature: 0,
      ignore_eos: true,
    } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    assert.equal(response.object, 'response');
    assert.match(response.id, /^resp_/);
    assert.equal(response.status, 'incomplete');
    assert.deepEqual(response.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(response.output_text, chat.choices[0]?.message.content);
    const item = response.output[0] as OpenAI.Responses.ResponseOutputMessage;
    assert.deepEqual([item.type, item.role, item.status], ['message', 'assistant', 'completed']);
    assert.equal(response.usage?.input_tokens, chat.usage.prompt_tokens);
    assert.equal(response.usage?.output_tokens, 12);
    assert.equal(response.usage?.total_tokens, chat.usage.prompt_tokens + 12);
    assert.equal(response.max_output_tokens, 12);
    assert.equal(response.instructions, instructions);
  });

  it('streams the named events in order; the deltas add up to the final text', async () => {
    const stream = await client.responses.create({
      model: 'tiny',
      instructions,
      input: [{ role: 'user', content: [{ type: 'input_text', text: input }] }],
      max_output_tokens: 12,
      temperature: 0,
      ignore_eos: true,
      stream: true,
    } as OpenAI.Responses.ResponseCreateParamsStreaming);
    const types: string[] = [];
    const sequence: number[] = [];
    let deltas = '';
    let final: OpenAI.Responses.Response | null = null;
    for await (const event of stream) {
      types.push(event.type);
      sequence.push(event.sequence_number);
      if (event.type === 'response.output_text.delta') deltas += event.delta;
      if (event.type === 'response.completed') final = event.response;
    }
    assert.deepEqual(
      sequence,
      sequence.map((_, i) => i),
    );
    const distinct = types.filter((t, i) => t !== types[i - 1]);
    assert.deepEqual(distinct, [
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    assert.equal(deltas, chat.choices[0]?.message.content);
    const item = final?.output[0] as OpenAI.Responses.ResponseOutputMessage | undefined;
    assert.equal((item?.content[0] as OpenAI.Responses.ResponseOutputText | undefined)?.text, deltas);
    assert.equal(final?.usage?.output_tokens, 12);
  });

  it('returns output logprobs when include asks for them', async () => {
    const r = await postForJson(`${s.url}/v1/responses`, {
      input,
      max_output_tokens: 3,
      temperature: 0,
      include: ['message.output_text.logprobs'],
      top_logprobs: 2,
    });
    assert.equal(r.status, 200);
    const content = (
      r.json['output'] as Array<{ content: Array<{ logprobs: Array<{ top_logprobs: unknown[] }> }> }>
    )[0]!.content[0]!;
    assert.equal(content.logprobs.length, 3);
    assert.ok(content.logprobs.every((l) => l.top_logprobs.length === 2));
  });

  it('refuses what needs a store or a parser, naming the field; keeps serving', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ input, previous_response_id: 'resp_1' }, 'previous_response_id'],
      [{ input, background: true }, 'background'],
      [{ input: [{ type: 'function_call', call_id: 'c', name: 'f', arguments: '{}' }] }, 'input[0].type'],
      [{ input, text: { format: { type: 'json_object' } } }, 'text'],
      [{ input, include: ['everything'] }, 'include'],
      [{ input, priority: 3 }, 'priority'],
      [{ input, cache_salt: '' }, 'cache_salt'],
      [{ input: [] }, 'input'],
    ];
    for (const [body, param] of cases) {
      const r = await postForJson(`${s.url}/v1/responses`, body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal((r.json['error'] as { param: string }).param, param);
    }
    const ok = await postForJson(`${s.url}/v1/responses`, { input: 'still up', max_output_tokens: 1 });
    assert.equal(ok.status, 200);
  });
});

describe('prefill/decode through /v1/responses', () => {
  let plain: Served;
  let prefill: Served;
  let decode: Served;
  before(async () => {
    ({ plain, prefill, decode } = await servePdTrio());
  });
  after(() => stop(plain, prefill, decode));

  it("decodes from the prefill server's KV; the answer equals a plain engine's", async () => {
    const body = {
      instructions,
      input: `${input}: and there was light.`,
      max_output_tokens: 10,
      temperature: 0,
    };
    const reference = await postForJson(`${plain.url}/v1/responses`, body);
    const p = await postForJson(`${prefill.url}/v1/responses`, {
      ...body,
      max_output_tokens: 1,
      kv_transfer_params: { do_remote_decode: true },
    });
    assert.equal(p.status, 200);
    const params = p.json['kv_transfer_params'] as Record<string, unknown>;
    assert.equal(params['do_remote_prefill'], true);
    const before = decode.engine.stats().externalPrefixCacheHitsTotal;
    const d = await postForJson(`${decode.url}/v1/responses`, { ...body, kv_transfer_params: params });
    assert.equal(d.status, 200);
    assert.ok(
      decode.engine.stats().externalPrefixCacheHitsTotal > before,
      'the KV came from the prefill server',
    );
    const tokens = (r: Record<string, unknown>) => {
      const usage = r['usage'] as { input_tokens: number; output_tokens: number };
      return [usage.input_tokens, usage.output_tokens];
    };
    assert.deepEqual(tokens(d.json), tokens(reference.json));
    const text = (r: Record<string, unknown>) =>
      (r['output'] as Array<{ content: Array<{ text: string }> }>)[0]!.content[0]!.text;
    assert.equal(text(d.json), text(reference.json));
  });
});
