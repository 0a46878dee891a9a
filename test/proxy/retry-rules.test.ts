/**
 * The proxy's retry and resume rules, leg by leg, against backend doubles that record what
 * they receive: which leg is sent again where, with which body, and what the client sees.
 * (test/proxy/failover-kill.test.ts kills real servers; this file pins the exact rules.)
 */
import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { describe, test } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import {
  decodeResponder,
  json,
  P_RETURNED_PARAMS,
  prefillResponder,
  type Received,
  UpstreamDouble,
  withProxy,
} from './helpers/upstream-double.ts';

setLogLevel('silent');

const PROMPT_IDS = [256, 72, 105];
/** least_loaded: ties go to the first listed backend, the faulty one. */
const FAULTY_FIRST = { policy: 'least_loaded' } as const;

function send(url: string, body: Record<string, unknown>, route = '/v1/completions'): Promise<Response> {
  return fetch(`${url}${route}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-id': 'req-1' },
    body: JSON.stringify({ model: 'tiny', max_tokens: 6, ...body }),
  });
}

async function retries(url: string, leg: string, reason: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text
    .split('\n')
    .find((l) => l.startsWith(`kvconnect:proxy_retries_total{leg="${leg}",reason="${reason}"}`));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

/** Writes SSE events and resolves once they left (so a later socket.destroy() cuts after them). */
async function sse(res: ServerResponse, events: unknown[], end: boolean): Promise<void> {
  if (!res.headersSent) res.writeHead(200, { 'content-type': 'text/event-stream' });
  for (const e of events) await new Promise((r) => res.write(`data: ${JSON.stringify(e)}\n\n`, r));
  if (end) res.end('data: [DONE]\n\n');
}

/**
 * A decode double that streams vLLM's return_token_ids chunks (token i has id 100 + i) and,
 * when `dieAfter` is given, drops the connection after that many tokens.
 */
function tokenStream(kind: 'completion' | 'chat', dieAfter: number | null) {
  return async (rec: Received, res: ServerResponse): Promise<void> => {
    const total = rec.body['max_tokens'] as number;
    const continuing = Array.isArray(rec.body['prompt']) && rec.body['prompt'].length > PROMPT_IDS.length;
    const start = continuing ? (rec.body['prompt'] as number[]).length - PROMPT_IDS.length : 0;
    const chat = kind === 'chat' && !continuing;
    const id = chat ? 'chatcmpl-x' : `cmpl-${continuing ? 'cont' : 'x'}`;
    const object = chat ? 'chat.completion.chunk' : 'text_completion';
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    if (chat) {
      const role = { index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null };
      await sse(res, [{ id, object, choices: [role], prompt_token_ids: PROMPT_IDS }], false);
    }
    for (let i = 0; i < total; i++) {
      if (dieAfter !== null && i === dieAfter) {
        res.socket?.destroy();
        return;
      }
      const t = start + i;
      const finish = i === total - 1 ? 'length' : null;
      const choice = chat
        ? { index: 0, delta: { content: `t${t} ` }, finish_reason: finish, token_ids: [100 + t] }
        : {
            index: 0,
            text: `t${t} `,
            finish_reason: finish,
            ...(i === 0 ? { prompt_token_ids: PROMPT_IDS } : { prompt_token_ids: null }),
            token_ids: [100 + t],
          };
      await sse(res, [{ id, object, created: continuing ? 2 : 1, model: 'tiny', choices: [choice] }], false);
    }
    const usage = { prompt_tokens: PROMPT_IDS.length + start, completion_tokens: total, total_tokens: 0 };
    await sse(res, [{ id, object, created: 1, model: 'tiny', choices: [], usage }], true);
  };
}

interface Read {
  ids: number[];
  text: string;
  chunkIds: Set<unknown>;
  usage: unknown;
  raw: string;
}

async function readStream(res: Response): Promise<Read> {
  const raw = await res.text();
  const out: Read = { ids: [], text: '', chunkIds: new Set(), usage: null, raw };
  for (const line of raw.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const e = JSON.parse(line.slice(6)) as {
      id: string;
      usage?: unknown;
      choices: Array<{ text?: string; delta?: { content?: string }; token_ids?: number[] }>;
    };
    out.chunkIds.add(e.id);
    if (e.usage) out.usage = e.usage;
    const c = e.choices[0];
    out.ids.push(...(c?.token_ids ?? []));
    out.text += c?.text ?? c?.delta?.content ?? '';
  }
  return out;
}

describe('decode legs that fail before their first byte', () => {
  test('refused: the other decode instance gets the same kv_transfer_params, no new prefill', async () => {
    const p = await UpstreamDouble.start(prefillResponder());
    const dead = await UpstreamDouble.start(decodeResponder());
    const d = await UpstreamDouble.start(decodeResponder());
    await withProxy(
      [p],
      [dead, d],
      { ...FAULTY_FIRST, healthIntervalMs: 60_000, unhealthyIntervalMs: 0 },
      async (url) => {
        await dead.close(); // still marked healthy: the request finds it refusing
        const res = await send(url, { prompt: 'hello' });
        assert.equal(res.status, 200);
        assert.equal(p.completions().length, 1, 'P prefilled once');
        assert.deepEqual(d.completions()[0]!.body['kv_transfer_params'], P_RETURNED_PARAMS);
        assert.equal(await retries(url, 'decode', 'connect'), 1);
      },
    );
  });

  test('5xx: the prefill leg runs again and the other decode instance gets its params', async () => {
    const p = await UpstreamDouble.start(prefillResponder());
    const bad = await UpstreamDouble.start((_rec, res) => json(res, 503, { error: { message: 'busy' } }));
    const d = await UpstreamDouble.start(decodeResponder());
    await withProxy([p], [bad, d], FAULTY_FIRST, async (url) => {
      const res = await send(url, { prompt: 'hello' });
      assert.equal(res.status, 200);
      assert.deepEqual(await res.json(), { id: 'cmpl-d', choices: [{ index: 0, text: 'decoded' }] });
      assert.equal(p.completions().length, 2, 'P prefilled again');
      assert.equal(bad.completions().length, 1);
      assert.equal(await retries(url, 'decode', 'status'), 1);
    });
  });

  test('--max-retries 0: the decode error reaches the client as it came', async () => {
    const p = await UpstreamDouble.start(prefillResponder());
    const bad = await UpstreamDouble.start((_rec, res) => json(res, 503, { error: { message: 'busy' } }));
    const d = await UpstreamDouble.start(decodeResponder());
    await withProxy([p], [bad, d], { ...FAULTY_FIRST, maxRetries: 0 }, async (url) => {
      const res = await send(url, { prompt: 'hello' });
      assert.equal(res.status, 503);
      assert.deepEqual(await res.json(), { error: { message: 'busy' } });
      assert.equal(d.completions().length, 0);
    });
  });

  test('a failed prefill leg goes to the other prefill instance before any fallback', async () => {
    const bad = await UpstreamDouble.start((_rec, res) => json(res, 500, { error: { message: 'boom' } }));
    const p = await UpstreamDouble.start(prefillResponder());
    const d = await UpstreamDouble.start(decodeResponder());
    await withProxy([bad, p], [d], FAULTY_FIRST, async (url) => {
      const res = await send(url, { prompt: 'hello' });
      assert.equal(res.status, 200);
      assert.equal(p.completions().length, 1);
      assert.deepEqual(d.completions()[0]!.body['kv_transfer_params'], P_RETURNED_PARAMS);
      assert.equal(await retries(url, 'prefill', 'status'), 1);
      const metrics = await (await fetch(`${url}/metrics`)).text();
      assert.doesNotMatch(metrics, /kvconnect:proxy_prefill_fallbacks_total\{/);
    });
  });
});

describe('streams that fail mid-way', () => {
  for (const kind of ['completion', 'chat'] as const) {
    test(`${kind}: continued on the other decode instance from the prompt ids plus the ids sent`, async () => {
      const p = await UpstreamDouble.start(prefillResponder());
      const dying = await UpstreamDouble.start(tokenStream(kind, 3));
      const d = await UpstreamDouble.start(tokenStream(kind, null));
      await withProxy([p], [dying, d], FAULTY_FIRST, async (url) => {
        const route = kind === 'chat' ? '/v1/chat/completions' : '/v1/completions';
        const input = kind === 'chat' ? { messages: [{ role: 'user', content: 'Hi' }] } : { prompt: 'Hi' };
        const res = await send(
          url,
          { ...input, stream: true, temperature: 0, stream_options: { include_usage: true } },
          route,
        );
        assert.equal(res.status, 200);
        const read = await readStream(res);
        assert.equal(read.text, 't0 t1 t2 t3 t4 t5 ', 'one uninterrupted text');
        assert.deepEqual([...read.chunkIds], [kind === 'chat' ? 'chatcmpl-x' : 'cmpl-x'], 'one response id');
        assert.doesNotMatch(read.raw, /token_ids/, 'ids stripped: the client did not ask');
        assert.deepEqual(read.usage, { prompt_tokens: 3, completion_tokens: 6, total_tokens: 9 });
        // The continuation came from /v1/completions; the client still sees its own stream's shape.
        assert.doesNotMatch(read.raw, kind === 'chat' ? /text_completion/ : /chat\.completion/);
        const cont = d.completions()[0]!;
        assert.equal(cont.path, '/v1/completions');
        assert.deepEqual(cont.body['prompt'], [...PROMPT_IDS, 100, 101, 102]);
        assert.equal(cont.body['max_tokens'], 3);
        assert.equal(cont.body['temperature'], 0);
        assert.equal(cont.body['return_token_ids'], true);
        assert.equal(cont.body['kv_transfer_params'], undefined);
        assert.equal(cont.body['messages'], undefined);
        assert.equal(dying.completions()[0]!.body['return_token_ids'], true, 'the decode leg asked for ids');
        assert.equal(await retries(url, 'resume', 'interrupted'), 1);
      });
    });
  }

  test('min_tokens: the continuation carries what is left of it', async () => {
    for (const [minTokens, left] of [
      [5, 2],
      [2, undefined],
    ] as const) {
      const p = await UpstreamDouble.start(prefillResponder());
      const dying = await UpstreamDouble.start(tokenStream('completion', 3));
      const d = await UpstreamDouble.start(tokenStream('completion', null));
      await withProxy([p], [dying, d], FAULTY_FIRST, async (url) => {
        const res = await send(url, { prompt: 'Hi', stream: true, temperature: 0, min_tokens: minTokens });
        assert.equal((await readStream(res)).text, 't0 t1 t2 t3 t4 t5 ');
        const cont = d.completions()[0]!;
        assert.deepEqual(cont.body['prompt'], [...PROMPT_IDS, 100, 101, 102]);
        assert.equal(cont.body['min_tokens'], left, `min_tokens ${minTokens} after 3 tokens`);
      });
    }
  });

  /** Streams the proxy does not resume (docs/proxy.md#failover), and why. */
  const NOT_RESUMED: Array<[string, 'completion' | 'chat', Record<string, unknown>]> = [
    ['n > 1', 'completion', { prompt: 'Hi', n: 2 }],
    ['several prompts', 'completion', { prompt: ['Hi', 'Ho'] }],
    [
      'tools',
      'chat',
      {
        messages: [{ role: 'user', content: 'Hi' }],
        tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
      },
    ],
    ['chat logprobs', 'chat', { messages: [{ role: 'user', content: 'Hi' }], logprobs: true }],
    ['presence_penalty', 'completion', { prompt: 'Hi', presence_penalty: 0.5 }],
    ['frequency_penalty', 'chat', { messages: [{ role: 'user', content: 'Hi' }], frequency_penalty: 0.5 }],
  ];
  for (const [what, kind, input] of NOT_RESUMED) {
    test(`not resumed, ${what}: failed over before its first event, cut after it`, async () => {
      const route = kind === 'chat' ? '/v1/chat/completions' : '/v1/completions';
      // Before the first event: the first decode instance drops the stream, or opens it with
      // a failed KV load; either way the other one serves the request whole.
      // (A failed KV load is the KV's fault, not the instance's: the retry may come back to it.)
      let failedLoads = 0;
      const kvLoadFailedOnce = async (rec: Received, res: ServerResponse): Promise<void> => {
        if (failedLoads++ > 0) return tokenStream(kind, null)(rec, res);
        const error = {
          message: 'KV load failed',
          type: 'InternalServerError',
          code: 500,
          kvconnect_code: 'KV_LOAD_FAILED',
        };
        await sse(res, [{ error }], true);
      };
      for (const first of [tokenStream('completion', 0), kvLoadFailedOnce]) {
        const p = await UpstreamDouble.start(prefillResponder());
        const dying = await UpstreamDouble.start(first);
        const d = await UpstreamDouble.start(tokenStream(kind, null));
        await withProxy([p], [dying, d], FAULTY_FIRST, async (url) => {
          const res = await send(url, { ...input, stream: true, temperature: 0 }, route);
          const read = await readStream(res);
          assert.match(read.raw, /data: \[DONE\]/);
          assert.equal(read.text, 't0 t1 t2 t3 t4 t5 ');
          assert.ok(dying.completions().length > 0, 'the first decode instance was tried');
          if (first === kvLoadFailedOnce) {
            assert.equal(dying.completions().length + d.completions().length, 2, 'one failed leg, one retry');
            assert.equal(await retries(url, 'decode', 'kv_load'), 1);
          } else {
            assert.equal(d.completions().length, 1, 'retried on the other decode instance');
          }
          assert.equal(dying.completions()[0]!.body['return_token_ids'], undefined, 'no ids asked');
        });
      }
      // After its first event: the client's stream ends where the decode instance's broke.
      const p = await UpstreamDouble.start(prefillResponder());
      const dying = await UpstreamDouble.start(tokenStream(kind, 3));
      const d = await UpstreamDouble.start(tokenStream(kind, null));
      await withProxy([p], [dying, d], FAULTY_FIRST, async (url) => {
        const res = await send(url, { ...input, stream: true, temperature: 0 }, route);
        const raw = await res.text().catch(() => '');
        assert.match(raw, /t2 /);
        assert.doesNotMatch(raw, /\[DONE\]|t3 /);
        assert.equal(d.completions().length, 0, 'no continuation');
        assert.equal(await retries(url, 'resume', 'interrupted'), 0);
      });
    });
  }

  test('--no-stream-resume: the stream ends where the decode instance died', async () => {
    const p = await UpstreamDouble.start(prefillResponder());
    const dying = await UpstreamDouble.start(tokenStream('completion', 3));
    const d = await UpstreamDouble.start(tokenStream('completion', null));
    await withProxy([p], [dying, d], { ...FAULTY_FIRST, streamResume: false }, async (url) => {
      const res = await send(url, { prompt: 'Hi', stream: true });
      const raw = await res.text().catch(() => '');
      assert.doesNotMatch(raw, /\[DONE\]/);
      assert.equal(dying.completions()[0]!.body['return_token_ids'], undefined);
      assert.equal(d.completions().length, 0);
    });
  });
});
