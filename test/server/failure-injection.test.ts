/**
 * --failure-injection-rate / --failure-types on a real server: every type answers with its
 * status and OpenAI error body; a rate of N% injects within 4-sigma binomial bounds and the
 * types are drawn uniformly; the server keeps serving; bad flags are config errors naming
 * the field.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { buildFailureInjection, FAILURE_TYPES, type FailureType } from '../../src/config/fault-injection.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { kvError } from '../helpers/kv-error.ts';
import { type Served, serve, stop } from './helpers/served.ts';

setLogLevel('error');

interface ErrorBody {
  error: {
    message: string;
    type: string;
    param: string | null;
    code: number;
    kvconnect_code: string;
    hint?: string;
  };
}

async function post(url: string, body: unknown): Promise<{ status: number; json: ErrorBody }> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as ErrorBody };
}

/** vLLM's status, OpenAI error class and param for each of the sim's failure types. */
const EXPECTED: Record<FailureType, { status: number; type: string; param: string | null; message: RegExp }> =
  {
    rate_limit: {
      status: 429,
      type: 'RateLimitError',
      param: null,
      message: /^Rate limit reached for tiny /,
    },
    invalid_api_key: {
      status: 401,
      type: 'AuthenticationError',
      param: null,
      message: /^Incorrect API key provided\.$/,
    },
    context_length: {
      status: 400,
      type: 'BadRequestError',
      param: 'messages',
      message:
        /^This model's maximum context length is 256 tokens\. However, your request has 257 input tokens/,
    },
    server_error: {
      status: 503,
      type: 'ServiceUnavailableError',
      param: null,
      message: /^The server is overloaded or not ready yet\.$/,
    },
    invalid_request: {
      status: 400,
      type: 'BadRequestError',
      param: 'model',
      message: /^Invalid request: missing required parameter 'model'\.$/,
    },
    model_not_found: {
      status: 404,
      type: 'NotFoundError',
      param: 'model',
      message: /^The model `tiny-nonexistent` does not exist\.$/,
    },
  };

describe('failure injection', () => {
  const servers: Served[] = [];
  after(async () => stop(...servers));

  it('each type at 100%: its status and error body, then a clean request is served', async () => {
    for (const type of FAILURE_TYPES) {
      const s = await serve({}, { failureInjection: { rate: 100, types: [type] } });
      servers.push(s);
      const { status, json } = await post(s.url, { model: 'tiny', prompt: 'Hi', max_tokens: 1 });
      const want = EXPECTED[type];
      assert.equal(status, want.status, `${type}: ${JSON.stringify(json)}`);
      assert.equal(json.error.code, want.status, `${type}: code is the HTTP status`);
      assert.equal(json.error.type, want.type, type);
      assert.equal(json.error.param, want.param, type);
      assert.match(json.error.message, want.message, type);
      assert.equal(json.error.kvconnect_code, `SERVER_INJECTED_${type.toUpperCase()}`);
      assert.match(json.error.hint ?? '', /failure-injection-rate/);
    }
  });

  describe('at 30% over all types', () => {
    let s: Served;
    before(async () => {
      s = await serve({}, { failureInjection: { rate: 30, types: [] } });
      servers.push(s);
    });

    it('injects within 4-sigma binomial bounds, each type uniformly, the rest reach the server', async () => {
      const n = 400;
      const p = 0.3;
      const byCode = new Map<string, number>();
      // A wrong model is answered 404 by the server itself, so the requests that were not
      // injected cost no engine step and are told apart by kvconnect_code.
      for (let i = 0; i < n; i++) {
        const { json } = await post(s.url, { model: 'not-served', prompt: 'Hi', max_tokens: 1 });
        byCode.set(json.error.kvconnect_code, (byCode.get(json.error.kvconnect_code) ?? 0) + 1);
      }
      const within = (k: number, q: number, what: string): void => {
        const mean = n * q;
        const sigma = Math.sqrt(n * q * (1 - q));
        assert.ok(Math.abs(k - mean) <= 4 * sigma, `${what}: ${k} of ${n}, expected ${mean} ± ${4 * sigma}`);
      };
      const injected = FAILURE_TYPES.reduce(
        (sum, t) => sum + (byCode.get(`SERVER_INJECTED_${t.toUpperCase()}`) ?? 0),
        0,
      );
      within(injected, p, 'injected');
      for (const t of FAILURE_TYPES) within(byCode.get(`SERVER_INJECTED_${t.toUpperCase()}`) ?? 0, p / 6, t);
      assert.equal(
        byCode.get('SERVER_MODEL_NOT_FOUND'),
        n - injected,
        'every other request reached the server',
      );
    });

    it('a request that is not injected is served normally', async () => {
      let served = 0;
      for (let i = 0; i < 40 && served === 0; i++) {
        const res = await fetch(`${s.url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'tiny', prompt: 'Hi', max_tokens: 2 }),
        });
        if (res.status === 200) served++;
        await res.arrayBuffer();
      }
      assert.equal(served, 1);
    });
  });

  it('chat completions are injected too; other routes never are', async () => {
    const s = await serve({}, { failureInjection: { rate: 100, types: ['server_error'] } });
    servers.push(s);
    const chat = await fetch(`${s.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 1 }),
    });
    assert.equal(chat.status, 503);
    for (const path of ['/health', '/v1/models', '/metrics']) {
      assert.equal((await fetch(`${s.url}${path}`)).status, 200, path);
    }
  });

  it('bad values are config errors naming the field', () => {
    for (const [values, field] of [
      [{ 'failure-injection-rate': '101' }, 'failure-injection-rate'],
      [{ 'failure-injection-rate': '12.5' }, 'failure-injection-rate'],
      [{ 'failure-types': ['rate_limit', 'oops'] }, 'failure-types'],
    ] as const) {
      const e = kvError(() => buildFailureInjection(values));
      assert.equal(e.code, 'KV_CONFIG_INVALID');
      assert.equal(e.field, field);
      assert.ok(e.hint);
    }
    assert.deepEqual(
      buildFailureInjection({ 'failure-injection-rate': '10', 'failure-types': ['rate_limit,server_error'] }),
      {
        rate: 10,
        types: ['rate_limit', 'server_error'],
      },
    );
    assert.deepEqual(buildFailureInjection({}), { rate: 0, types: [] });
  });
});
