import assert from 'node:assert/strict';
import { request } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { KVError } from '../../src/errors/index.ts';
import {
  type BodyRules,
  createHttpServer,
  type HttpListener,
  listen,
  Router,
  readJson,
  sendJson,
  writeChunk,
} from '../../src/http/index.ts';

const CHUNK = 4 * 1024 * 1024;
const CHUNKS = 16;

const RULES: BodyRules = {
  maxBytes: 1024,
  tooLarge: 'SERVER_BODY_TOO_LARGE',
  invalidJson: 'SERVER_INVALID_JSON',
  limitHint: 'raise the limit',
};

interface ErrorBody {
  error: {
    code: number;
    kvconnect_code: string;
    type: string;
    message: string;
    param: string | null;
    hint?: string;
  };
}

/** POSTs `chunks` one by one with chunked encoding (no content-length), so the limit is hit mid-stream. */
function postChunked(url: string, chunks: string[]): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', headers: { 'transfer-encoding': 'chunked' } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    for (const c of chunks) req.write(c);
    req.end();
  });
}

describe('src/http: one request/response convention for server and proxy', () => {
  let running: HttpListener;
  let url: string;
  let written = 0;
  let finished: Promise<void> | null = null;

  before(async () => {
    const router = new Router({ notFound: 'PROXY_NOT_FOUND', methodNotAllowed: 'PROXY_METHOD_NOT_ALLOWED' })
      .on('POST', '/echo', async (req, res) => sendJson(res, 200, { got: await readJson(req, RULES) }))
      .on('GET', '/fail', () => {
        throw new KVError('PROXY_NO_BACKEND', 'nothing healthy', { hint: 'start one' });
      })
      .on('GET', '/bug', () => {
        throw new Error('a plain error');
      })
      .on('GET', '/big', (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        const chunk = new Uint8Array(CHUNK);
        finished = (async () => {
          for (let i = 0; i < CHUNKS; i++) {
            await writeChunk(res, chunk);
            written++;
          }
          res.end();
        })();
      });
    running = await listen(createHttpServer(router.listener()), 0, '127.0.0.1');
    url = running.url;
  });
  after(() => running.close());

  test('a JSON body is read; invalid JSON is a 400 with the caller’s code', async () => {
    const ok = await fetch(`${url}/echo`, { method: 'POST', body: '{"a":1}' });
    assert.equal(ok.status, 200);
    assert.deepEqual(await ok.json(), { got: { a: 1 } });
    const bad = await fetch(`${url}/echo`, { method: 'POST', body: '{"a":' });
    assert.equal(bad.status, 400);
    const e = (await bad.json()) as ErrorBody;
    assert.equal(e.error.kvconnect_code, 'SERVER_INVALID_JSON');
    assert.equal(e.error.type, 'BadRequestError');
  });

  test('a body over the limit is a 413, declared by content-length or found while streaming', async () => {
    const declared = await fetch(`${url}/echo`, { method: 'POST', body: `"${'x'.repeat(2000)}"` });
    assert.equal(declared.status, 413);
    const e = (await declared.json()) as ErrorBody;
    assert.equal(e.error.kvconnect_code, 'SERVER_BODY_TOO_LARGE');
    assert.equal(e.error.hint, 'raise the limit');
    const streamed = await postChunked(`${url}/echo`, ['"', 'y'.repeat(700), 'y'.repeat(700), '"']);
    assert.equal(streamed.status, 413);
    assert.equal((JSON.parse(streamed.body) as ErrorBody).error.kvconnect_code, 'SERVER_BODY_TOO_LARGE');
    const after413 = await fetch(`${url}/echo`, { method: 'POST', body: '[1]' });
    assert.equal(after413.status, 200, 'the server keeps serving');
  });

  test('unknown paths are 404, wrong methods 405, HEAD falls back to GET', async () => {
    const nf = await fetch(`${url}/nope`);
    assert.equal(nf.status, 404);
    const nfBody = (await nf.json()) as ErrorBody;
    assert.equal(nfBody.error.kvconnect_code, 'PROXY_NOT_FOUND');
    assert.equal(nfBody.error.type, 'NotFoundError');
    assert.match(nfBody.error.hint ?? '', /POST \/echo/);
    const na = await fetch(`${url}/echo`);
    assert.equal(na.status, 405);
    assert.equal(((await na.json()) as ErrorBody).error.kvconnect_code, 'PROXY_METHOD_NOT_ALLOWED');
    const head = await fetch(`${url}/fail`, { method: 'HEAD' });
    assert.equal(head.status, 503);
  });

  test('a KVError is answered with the status its code declares; anything else is a 500', async () => {
    const fail = await fetch(`${url}/fail`);
    assert.equal(fail.status, 503);
    const body = (await fail.json()) as ErrorBody;
    assert.deepEqual(body.error, {
      message: 'nothing healthy',
      type: 'ServiceUnavailableError',
      param: null,
      code: 503,
      kvconnect_code: 'PROXY_NO_BACKEND',
      hint: 'start one',
    });
    const bug = await fetch(`${url}/bug`);
    assert.equal(bug.status, 500);
    assert.deepEqual(((await bug.json()) as ErrorBody).error, {
      message: 'a plain error',
      type: 'InternalServerError',
      param: null,
      code: 500,
      kvconnect_code: 'INTERNAL_ERROR',
    });
  });

  test('writeChunk holds the sender while the client does not read, and every byte arrives', async () => {
    const res = await fetch(`${url}/big`);
    const reader = res.body!.getReader();
    const first = await reader.read();
    let total = first.value?.length ?? 0;
    // Without back-pressure all writes would complete at once into memory; with it the
    // sender is held by socket buffers (a few MiB on loopback) until this reader goes on.
    assert.ok(written < CHUNKS / 2, `only ${written} of ${CHUNKS} chunks may be out before the client reads`);
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.length;
    }
    await finished;
    assert.equal(total, CHUNKS * CHUNK);
    assert.equal(written, CHUNKS);
  });

  test('keep-alive is granted without a Keep-Alive hint, so a client idles less than the server', async () => {
    let connections = 0;
    const count = (): void => {
      connections++;
    };
    running.server.on('connection', count);
    try {
      for (let i = 0; i < 3; i++) {
        const res = await fetch(`${url}/echo`, { method: 'POST', body: JSON.stringify({ i }) });
        assert.equal(res.status, 200);
        await res.json();
        assert.equal(res.headers.get('connection'), 'keep-alive');
        // No `Keep-Alive: timeout=65`: undici would then keep an idle connection until 63 s
        // and reuse it a loaded second or two before the server closes it.
        assert.equal(res.headers.get('keep-alive'), null);
      }
      assert.ok(connections <= 1, `${connections} connections for 3 sequential requests: kept alive`);
      const closing = await new Promise<{ connection: unknown; keepAlive: unknown }>((resolve, reject) => {
        const req = request(`${url}/echo`, { method: 'POST', headers: { connection: 'close' } }, (res) => {
          res.resume();
          resolve({ connection: res.headers.connection, keepAlive: res.headers['keep-alive'] });
        });
        req.on('error', reject);
        req.end('{}');
      });
      assert.deepEqual(closing, { connection: 'close', keepAlive: undefined });
    } finally {
      running.server.off('connection', count);
    }
  });
});
