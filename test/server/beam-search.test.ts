/**
 * use_beam_search through a real server: width 1 is greedy decoding (same token ids); width
 * n answers n distinct beams best first, each beam's cumulative logprob checked against the
 * same engine's prompt_logprobs of prompt + beam (an independent computation), the order
 * following vLLM's score cum / length ** length_penalty; streaming gives the same beams;
 * chat works; combinations kvconnect refuses are 400s naming the field.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { beamScore } from '../../src/server/beam-search.ts';
import { postForJson, type Served, serve, stop } from './helpers/served.ts';

setLogLevel('error');

interface Choice {
  index: number;
  token_ids: number[];
  prompt_token_ids: number[];
  finish_reason: string;
}

const prompt = 'And the earth was without form, and void';

describe('use_beam_search', () => {
  let s: Served;
  let promptIds: number[];
  before(async () => {
    s = await serve({ max_model_len: 256, num_gpu_blocks: 128 });
    promptIds = s.engine.tokenizer.encode(prompt);
  });
  after(() => stop(s));

  async function beams(extra: Record<string, unknown>): Promise<Choice[]> {
    const r = await postForJson(`${s.url}/v1/completions`, {
      prompt,
      max_tokens: 5,
      ignore_eos: true,
      use_beam_search: true,
      return_token_ids: true,
      ...extra,
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    return r.json['choices'] as Choice[];
  }

  /** Sum of the logprobs of `tokens` after the prompt, from a prefill's prompt_logprobs. */
  async function cumLogprob(tokens: number[]): Promise<number> {
    const r = await postForJson(`${s.url}/v1/completions`, {
      prompt: [...promptIds, ...tokens],
      max_tokens: 1,
      prompt_logprobs: 0,
    });
    const positions = (
      r.json['choices'] as Array<{ prompt_logprobs: Array<Record<string, { logprob: number }> | null> }>
    )[0]!.prompt_logprobs;
    let sum = 0;
    for (const [i, id] of tokens.entries()) sum += positions[promptIds.length + i]![String(id)]!.logprob;
    return sum;
  }

  it('width 1 is greedy decoding', async () => {
    const greedy = await postForJson(`${s.url}/v1/completions`, {
      prompt,
      max_tokens: 5,
      ignore_eos: true,
      temperature: 0,
      return_token_ids: true,
    });
    const [beam] = await beams({ n: 1 });
    assert.deepEqual(beam?.token_ids, (greedy.json['choices'] as Choice[])[0]?.token_ids);
  });

  for (const lengthPenalty of [1, 0.5]) {
    it(`width 3, length_penalty ${lengthPenalty}: distinct beams, best first by vLLM's score`, async () => {
      const choices = await beams({ n: 3, length_penalty: lengthPenalty });
      assert.deepEqual(
        choices.map((c) => c.index),
        [0, 1, 2],
      );
      const keys = new Set(choices.map((c) => c.token_ids.join(',')));
      assert.equal(keys.size, 3, 'distinct beams');
      const scores: number[] = [];
      for (const c of choices) {
        assert.equal(c.token_ids.length, 5);
        assert.equal(c.finish_reason, 'length');
        const cum = await cumLogprob(c.token_ids);
        scores.push(beamScore([...promptIds, ...c.token_ids], cum, -1, lengthPenalty));
      }
      for (let i = 1; i < scores.length; i++)
        assert.ok(scores[i - 1]! >= scores[i]! - 1e-3, `scores in order: ${scores}`);
    });
  }

  it('streams the same beams, one chunk per beam', async () => {
    const plain = await beams({ n: 2 });
    const res = await fetch(`${s.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        prompt,
        max_tokens: 5,
        ignore_eos: true,
        use_beam_search: true,
        n: 2,
        stream: true,
        return_token_ids: true,
      }),
    });
    const chunks = (await res.text())
      .split('\n\n')
      .filter((e) => e.startsWith('data: {'))
      .map((e) => JSON.parse(e.slice(6)) as { choices: Choice[] });
    const byIndex = new Map<number, number[]>();
    for (const c of chunks)
      for (const ch of c.choices) byIndex.set(ch.index, [...(byIndex.get(ch.index) ?? []), ...ch.token_ids]);
    assert.deepEqual(
      [byIndex.get(0), byIndex.get(1)],
      plain.map((c) => c.token_ids),
    );
  });

  it('chat takes beam search too', async () => {
    const r = await postForJson(`${s.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: prompt }],
      max_tokens: 4,
      ignore_eos: true,
      use_beam_search: true,
      n: 2,
      return_token_ids: true,
    });
    assert.equal(r.status, 200);
    const choices = r.json['choices'] as Choice[];
    assert.equal(choices.length, 2);
    assert.notDeepEqual(choices[0]?.token_ids, choices[1]?.token_ids);
  });

  it('refuses a width over 10, and kv_transfer_params or prompt_logprobs with it', async () => {
    for (const [extra, param] of [
      [{ n: 11 }, 'n'],
      [{ n: 2, kv_transfer_params: { do_remote_decode: true } }, 'kv_transfer_params'],
      [{ n: 2, prompt_logprobs: 1 }, 'prompt_logprobs'],
    ] as const) {
      const r = await postForJson(`${s.url}/v1/completions`, {
        prompt,
        max_tokens: 2,
        use_beam_search: true,
        ...extra,
      });
      assert.equal(r.status, 400, JSON.stringify(extra));
      assert.equal((r.json['error'] as { param: string }).param, param);
    }
  });
});
