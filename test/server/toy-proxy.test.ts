/**
 * Prefill/decode driven the way vLLM's own toy proxy drives it
 * (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py in vLLM): vLLM's file is not
 * in this repository, so the proxy below re-creates its requests over real HTTP — the same
 * bodies (P gets kv_transfer_params with do_remote_decode and null remote fields,
 * stream false, max_tokens 1, no stream_options/min_tokens; D gets the client's body plus P's
 * kv_transfer_params and `min_tokens: null`), the same headers (`Authorization: Bearer
 * None` when OPENAI_API_KEY is unset, one `X-Request-Id` uuid for both legs), and D's
 * answer streamed back. Every answer must equal a plain engine's (greedy).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createServer as createHttpServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { type Served, serve, stop } from './helpers/served.ts';

setLogLevel('error');

function serveWith(kv: Record<string, unknown> | null): Promise<Served> {
  return serve({ num_gpu_blocks: 64, ...(kv ? { kv_transfer_config: kv } : {}) });
}

function nixl(role: 'kv_producer' | 'kv_consumer'): Record<string, unknown> {
  return {
    kv_connector: 'NixlConnector',
    kv_role: role,
    kv_connector_extra_config: { backends: ['TCP'], side_channel_port: 0 },
  };
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** What the toy proxy saw of each leg, for the assertions. */
interface Leg {
  body: Record<string, unknown>;
  headers: Record<string, string>;
  status: number;
  responseRequestId: string | null;
}

/** The toy proxy's _handle_completions, over node:http and fetch. */
async function toyProxy(
  prefillUrl: string,
  decodeUrl: string,
  legs: Leg[],
): Promise<{ url: string; server: Server }> {
  const server = createHttpServer((req, res) => {
    void (async () => {
      const api = req.url === '/v1/chat/completions' ? '/chat/completions' : '/completions';
      const reqData = JSON.parse(await readBody(req)) as Record<string, unknown>;
      const requestId = randomUUID();
      // Python's f"Bearer {os.environ.get('OPENAI_API_KEY')}" with the variable unset.
      const headers = {
        'content-type': 'application/json',
        Authorization: `Bearer ${process.env['OPENAI_API_KEY'] ?? 'None'}`,
        'X-Request-Id': requestId,
      };
      const p: Record<string, unknown> = {
        ...reqData,
        kv_transfer_params: {
          do_remote_decode: true,
          do_remote_prefill: false,
          remote_engine_id: null,
          remote_block_ids: null,
          remote_host: null,
          remote_port: null,
        },
        stream: false,
        max_tokens: 1,
      };
      if ('max_completion_tokens' in p) p['max_completion_tokens'] = 1;
      delete p['stream_options'];
      delete p['min_tokens'];
      delete p['min_completion_tokens'];
      const pRes = await fetch(`${prefillUrl}/v1${api}`, {
        method: 'POST',
        headers,
        body: JSON.stringify(p),
      });
      const pJson = (await pRes.json()) as Record<string, unknown>;
      legs.push({
        body: p,
        headers,
        status: pRes.status,
        responseRequestId: pRes.headers.get('x-request-id'),
      });
      if (pRes.status !== 200) throw new Error(`P answered ${pRes.status}: ${JSON.stringify(pJson)}`);
      const d: Record<string, unknown> = { ...reqData, min_tokens: null, min_completion_tokens: null };
      if (pJson['kv_transfer_params']) d['kv_transfer_params'] = pJson['kv_transfer_params'];
      const dRes = await fetch(`${decodeUrl}/v1${api}`, { method: 'POST', headers, body: JSON.stringify(d) });
      legs.push({
        body: d,
        headers,
        status: dRes.status,
        responseRequestId: dRes.headers.get('x-request-id'),
      });
      res.writeHead(dRes.status, { 'content-type': 'application/json' });
      for await (const chunk of dRes.body!) res.write(chunk);
      res.end();
    })().catch((e: Error) => {
      res.writeHead(500);
      res.end(e.message);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

async function completion(url: string, path: string, body: Record<string, unknown>): Promise<string> {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  assert.equal(res.status, 200, text);
  return text;
}

/** The generated text of a JSON answer or of an SSE stream. */
function generated(text: string): string {
  if (!text.startsWith('data: ')) {
    const choice = (JSON.parse(text) as { choices: Array<{ text?: string; message?: { content: string } }> })
      .choices[0]!;
    return choice.text ?? choice.message!.content;
  }
  let out = '';
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const chunk = JSON.parse(line.slice(6)) as {
      error?: unknown;
      choices: Array<{ text?: string; delta?: { content?: string } }>;
    };
    assert.equal(chunk.error, undefined, line);
    for (const c of chunk.choices) out += c.text ?? c.delta?.content ?? '';
  }
  return out;
}

const PROMPT = 'Prefill on one engine, decode on another: the toy proxy of vLLM shows how it is wired.';

describe("vLLM's toy P/D proxy requests against kvconnect serve", () => {
  let p: Served;
  let d: Served;
  let plain: Served;
  let proxy: { url: string; server: Server };
  const legs: Leg[] = [];
  before(async () => {
    p = await serveWith(nixl('kv_producer'));
    d = await serveWith(nixl('kv_consumer'));
    plain = await serveWith(null);
    proxy = await toyProxy(p.url, d.url, legs);
  });
  after(async () => {
    proxy.server.close();
    await stop(p, d, plain);
  });

  const cases: Array<[string, string, Record<string, unknown>]> = [
    ['completion', '/v1/completions', { prompt: PROMPT, max_tokens: 12 }],
    [
      'completion, streamed with usage',
      '/v1/completions',
      { prompt: PROMPT, max_tokens: 12, stream: true, stream_options: { include_usage: true } },
    ],
    [
      'chat, streamed',
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: PROMPT }], max_completion_tokens: 10, stream: true },
    ],
    [
      'completion with token ids',
      '/v1/completions',
      { prompt: PROMPT, max_tokens: 8, logprobs: 0, return_tokens_as_token_ids: true },
    ],
  ];
  for (const [name, path, request] of cases) {
    it(`${name}: D loads P's KV and answers exactly as a plain engine`, async () => {
      const body = { model: 'tiny', temperature: 0, ignore_eos: true, ...request };
      const loadedBefore = d.engine.stats().externalPrefixCacheHitsTotal;
      legs.length = 0;
      const viaProxy = await completion(proxy.url, path, body);
      const reference = await completion(plain.url, path, body);
      assert.equal(generated(viaProxy), generated(reference));
      if (request['logprobs'] !== undefined) {
        const ids = (t: string) =>
          (JSON.parse(t) as { choices: Array<{ logprobs: { tokens: string[] } }> }).choices[0]!.logprobs
            .tokens;
        assert.deepEqual(ids(viaProxy), ids(reference), 'the same token ids');
      }
      assert.ok(d.engine.stats().externalPrefixCacheHitsTotal > loadedBefore, 'D loaded the prompt from P');

      const [pLeg, dLeg] = legs;
      assert.equal(pLeg!.status, 200);
      assert.equal(dLeg!.status, 200);
      assert.equal(pLeg!.headers['Authorization'], 'Bearer None');
      assert.equal(pLeg!.headers['X-Request-Id'], dLeg!.headers['X-Request-Id']);
      assert.equal(pLeg!.responseRequestId, pLeg!.headers['X-Request-Id'], 'P echoes X-Request-Id');
      assert.equal(dLeg!.responseRequestId, dLeg!.headers['X-Request-Id'], 'D echoes X-Request-Id');
      assert.deepEqual(
        (pLeg!.body['kv_transfer_params'] as Record<string, unknown>)['remote_block_ids'],
        null,
        'P got the null remote fields',
      );
      assert.equal(dLeg!.body['min_tokens'], null, 'D got min_tokens: null');
      const dParams = dLeg!.body['kv_transfer_params'] as Record<string, unknown>;
      assert.equal(dParams['do_remote_prefill'], true);
    });
  }

  it('both pools drain once every hand-off is done', async () => {
    for (const s of [p, d]) {
      const deadline = Date.now() + 10_000;
      while (s.engine.stats().kvCacheUsage > 0 || s.engine.engine.hasWork()) {
        assert.ok(Date.now() < deadline, 'blocks freed');
        await new Promise((r) => setTimeout(r, 10));
      }
    }
  });
});
