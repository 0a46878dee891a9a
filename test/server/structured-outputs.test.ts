/**
 * Structured outputs on a real server (kjv-llama): response_format json_object / json_schema,
 * structured_outputs regex / choice / grammar and the guided_* fields constrain the output;
 * streaming yields the same tokens; greedy outputs equal an engine run of the same
 * constraint; conflicting or invalid constraints are 400s naming the field, as in vLLM; a
 * P/D pair gives the token ids of one plain engine.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { LLM } from '../../src/engine/llm.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { postJson } from './helpers/harness.ts';
import { postForJson as post, type Served, serve, servePdTrio, stop } from './helpers/served.ts';

setLogLevel('error');

const PROMPT = 'In the beginning God created';
const SCHEMA = {
  type: 'object',
  properties: {
    book: { type: 'string', enum: ['Genesis', 'Exodus'] },
    chapter: { type: 'integer', minimum: 1, maximum: 50 },
  },
  required: ['book', 'chapter'],
  additionalProperties: false,
};

interface Choice {
  text?: string;
  message?: { content: string };
  finish_reason: string;
  token_ids?: number[];
}

describe('structured outputs', () => {
  let s: Served;
  before(async () => {
    s = await serve({ model: 'kjv-llama', max_model_len: 256, num_gpu_blocks: 64 });
  });
  after(() => stop(s));

  async function complete(extra: Record<string, unknown>): Promise<Choice> {
    const r = await post(`${s.url}/v1/completions`, {
      prompt: PROMPT,
      max_tokens: 48,
      temperature: 0,
      return_token_ids: true,
      ...extra,
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const choice = (r.json['choices'] as Choice[])[0] as Choice;
    assert.equal(choice.finish_reason, 'stop', `the constraint completed: ${JSON.stringify(choice.text)}`);
    return choice;
  }

  it('response_format json_object: the output parses as a JSON object', async () => {
    const choice = await complete({ max_tokens: 64, response_format: { type: 'json_object' } });
    const value = JSON.parse(choice.text ?? '') as unknown;
    assert.ok(typeof value === 'object' && value !== null && !Array.isArray(value), choice.text);
  });

  it('chat response_format json_schema: the answer validates against the schema', async () => {
    const r = await post(`${s.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'And God said' }],
      max_tokens: 48,
      temperature: 0,
      response_format: { type: 'json_schema', json_schema: { name: 'ref', schema: SCHEMA } },
      structured_outputs: { disable_any_whitespace: true },
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const choice = (r.json['choices'] as Choice[])[0] as Choice;
    assert.equal(choice.finish_reason, 'stop', choice.message?.content);
    const value = JSON.parse(choice.message?.content ?? '') as Record<string, unknown>;
    assert.deepEqual(Object.keys(value).sort(), ['book', 'chapter']);
    assert.ok(['Genesis', 'Exodus'].includes(value['book'] as string));
    const chapter = value['chapter'] as number;
    assert.ok(Number.isInteger(chapter) && chapter >= 1 && chapter <= 50, String(chapter));
  });

  it('Responses API: text.format json_schema and structured_outputs constrain the output', async () => {
    const respond = async (extra: Record<string, unknown>): Promise<{ status: number; text: string }> => {
      const r = await post(`${s.url}/v1/responses`, {
        input: 'And God said',
        max_output_tokens: 64,
        temperature: 0,
        ...extra,
      });
      const output = r.json['output'] as Array<{ content: Array<{ text: string }> }> | undefined;
      return { status: r.status, text: output?.[0]?.content[0]?.text ?? JSON.stringify(r.json) };
    };
    const choices = ['light', 'darkness'];
    const chosen = await respond({ structured_outputs: { choice: choices } });
    assert.ok(choices.includes(chosen.text), chosen.text);
    // Any whitespace between JSON elements: this model pads with it, so only the start is checked.
    const json = await respond({ text: { format: { type: 'json_schema', name: 'ref', schema: SCHEMA } } });
    assert.equal(json.status, 200);
    assert.match(json.text, /^\{\s*"(book|chapter)"/);
    const both = await respond({
      text: { format: { type: 'json_schema', schema: SCHEMA } },
      structured_outputs: { choice: choices },
    });
    assert.equal(both.status, 400);
    assert.match(both.text, /Cannot specify both structured_outputs and text.format/);
  });

  it('regex, choice, grammar, structural tags and the guided_* fields', async () => {
    assert.match(
      (await complete({ structured_outputs: { regex: '[0-9]{3}-[a-z]{2}' } })).text ?? '',
      /^[0-9]{3}-[a-z]{2}$/,
    );
    const choices = ['light', 'darkness', 'waters'];
    assert.ok(
      choices.includes(
        (
          await complete({
            structured_outputs: {
              choice: choices,
              disable_additional_properties: true,
              disable_fallback: true,
            },
          })
        ).text ?? '',
      ),
    );
    const grammar = 'root ::= "(" word (" " word)? ")"\nword ::= [a-z]{1,6}';
    assert.match(
      (await complete({ structured_outputs: { grammar } })).text ?? '',
      /^\([a-z]{1,6}( [a-z]{1,6})?\)$/,
    );
    assert.match((await complete({ guided_regex: '[A-Z][a-z]{1,8}' })).text ?? '', /^[A-Z][a-z]{1,8}$/);
    assert.ok(choices.includes((await complete({ guided_choice: choices })).text ?? ''));
    const tag = {
      type: 'structural_tag',
      format: {
        type: 'sequence',
        elements: [
          { type: 'const_string', value: 'Chapter ' },
          { type: 'regex', pattern: '[1-9][0-9]?' },
        ],
      },
    };
    assert.match((await complete({ response_format: tag })).text ?? '', /^Chapter [1-9][0-9]?$/);
    assert.match(
      (await complete({ structured_outputs: { structural_tag: JSON.stringify(tag) } })).text ?? '',
      /^Chapter [1-9][0-9]?$/,
    );
    const tokens = await post(`${s.url}/inference/v1/generate`, {
      token_ids: s.engine.tokenizer.encode(PROMPT),
      sampling_params: { max_tokens: 16, temperature: 0, structured_outputs: { choice: choices } },
    });
    assert.equal(tokens.status, 200, JSON.stringify(tokens.json));
    const ids = (tokens.json['choices'] as Choice[])[0]?.token_ids ?? [];
    assert.ok(choices.includes(s.engine.tokenizer.decode(ids)), JSON.stringify(ids));
  });

  it('streaming gives the same tokens; greedy output equals the engine run of the same constraint', async () => {
    const body = { structured_outputs: { regex: '[a-z]{1,6}( [a-z]{1,6}){2}' } };
    const plain = await complete(body);
    const res = await postJson(`${s.url}/v1/completions`, {
      prompt: PROMPT,
      max_tokens: 48,
      temperature: 0,
      return_token_ids: true,
      stream: true,
      ...body,
    });
    const streamed: number[] = [];
    for (const line of (await res.text()).split('\n')) {
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      const chunk = JSON.parse(line.slice(6)) as { choices: Choice[] };
      streamed.push(...(chunk.choices[0]?.token_ids ?? []));
    }
    assert.deepEqual(streamed, plain.token_ids);
    const llm = await LLM.create({ model: 'kjv-llama', max_model_len: 256, num_gpu_blocks: 32 });
    try {
      const [engine] = await llm.generate(PROMPT, {
        maxTokens: 48,
        temperature: 0,
        structuredOutputs: { regex: '[a-z]{1,6}( [a-z]{1,6}){2}' },
      });
      assert.deepEqual(engine?.tokenIds, plain.token_ids);
    } finally {
      await llm.shutdown();
    }
  });

  it('400s as vLLM: conflicting constraints, invalid ones, unsupported options; the server keeps serving', async () => {
    const cases: Array<[Record<string, unknown>, string, RegExp]> = [
      [
        { structured_outputs: { json: SCHEMA, choice: ['a'] } },
        'structured_outputs',
        /only use one kind of constraints/,
      ],
      [
        { structured_outputs: { regex: 'a' }, response_format: { type: 'json_object' } },
        'response_format',
        /multiple are specified/,
      ],
      [{ guided_json: SCHEMA, guided_choice: ['a'] }, 'guided_json', /only use one kind of guided decoding/],
      [
        { structured_outputs: { grammar: 'root ::= (' } },
        'structured_outputs',
        /Invalid grammar specification/,
      ],
      [{ guided_regex: '(' }, 'guided_regex', /Invalid regular expression/],
      [
        { response_format: { type: 'json_schema', json_schema: { name: 'x' } } },
        'response_format.json_schema.schema',
        /schema/,
      ],
      [
        { structured_outputs: { whitespace_pattern: ' ', json_object: true } },
        'structured_outputs.whitespace_pattern',
        /not supported/,
      ],
      [{ structural_tag: '{}' }, 'structural_tag', /not a request field/],
      [
        { structured_outputs: { structural_tag: '[1]' } },
        'structured_outputs.structural_tag',
        /structural tag/,
      ],
      [{ use_beam_search: true, n: 2, guided_choice: ['a', 'b'] }, 'use_beam_search', /Beam search/],
      [
        { guided_decoding_backend: 'outlines', guided_regex: 'a' },
        'guided_decoding_backend',
        /^Request-level structured output backend selection is not supported\. The request specified 'outlines', but vLLM was initialised with 'auto'\. This error can be resolved by removing 'guided_decoding_backend' from the request\.$/,
      ],
      [
        { structured_outputs: { regex: 'a', _backend: 'guidance' } },
        'structured_outputs._backend',
        /The request specified 'guidance', but vLLM was initialised with 'auto'.*removing '_backend'/,
      ],
      [
        { structured_outputs: { regex: 'a', backend: 'lm-format-enforcer' } },
        'structured_outputs.backend',
        /The request specified 'lm-format-enforcer'/,
      ],
      [
        { guided_json: SCHEMA, guided_whitespace_pattern: '[ ]?' },
        'guided_whitespace_pattern',
        /guided_whitespace_pattern is not supported/,
      ],
    ];
    for (const [extra, param, message] of cases) {
      const r = await post(`${s.url}/v1/completions`, { prompt: PROMPT, max_tokens: 4, ...extra });
      assert.equal(r.status, 400, JSON.stringify(extra));
      const error = r.json['error'] as { param: string; message: string; code: number };
      assert.equal(error.code, 400);
      assert.equal(error.param, param, JSON.stringify(extra));
      assert.match(error.message, message);
    }
    assert.match((await complete({ structured_outputs: { regex: 'ok' } })).text ?? '', /^ok$/);
    // The engine's backend (auto) and the one it runs (xgrammar) may be named.
    assert.match(
      (await complete({ structured_outputs: { regex: 'ok', backend: 'xgrammar' } })).text ?? '',
      /^ok$/,
    );
    assert.match(
      (await complete({ guided_regex: 'ok', guided_decoding_backend: 'auto' })).text ?? '',
      /^ok$/,
    );
  });
});

describe('structured outputs disaggregated (NixlConnector over TCP)', () => {
  let plain: Served;
  let prefill: Served;
  let decode: Served;
  before(async () => {
    ({ plain, prefill, decode } = await servePdTrio());
  });
  after(() => stop(plain, prefill, decode));

  it('the decode server applies the constraint from its first token: same ids as one plain engine', async () => {
    const body = {
      prompt: 'In the beginning God created the heaven',
      max_tokens: 24,
      temperature: 0,
      return_token_ids: true,
      structured_outputs: { regex: '[0-9]{3}-[a-z]{2}' },
    };
    const ids = (r: { json: Record<string, unknown> }) => (r.json['choices'] as Choice[])[0]?.token_ids;
    const reference = await post(`${plain.url}/v1/completions`, body);
    assert.equal(reference.status, 200, JSON.stringify(reference.json));
    const p = await post(`${prefill.url}/v1/completions`, {
      ...body,
      max_tokens: 1,
      kv_transfer_params: { do_remote_decode: true },
    });
    assert.equal(p.status, 200, JSON.stringify(p.json));
    const before = decode.engine.stats().externalPrefixCacheHitsTotal;
    const d = await post(`${decode.url}/v1/completions`, {
      ...body,
      kv_transfer_params: p.json['kv_transfer_params'],
    });
    assert.equal(d.status, 200, JSON.stringify(d.json));
    assert.ok(
      decode.engine.stats().externalPrefixCacheHitsTotal > before,
      'the KV came from the prefill server',
    );
    assert.deepEqual(ids(d), ids(reference));
    assert.match(plain.engine.tokenizer.decode(ids(reference) ?? []), /^[0-9]{3}-[a-z]{2}$/);
  });
});
