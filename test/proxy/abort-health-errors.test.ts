import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { captureLogs, setLogLevel } from '../../src/logging/logger.ts';
import { resolveProxyOptions, startProxy } from '../../src/proxy/index.ts';
import type { PdConnector } from '../../src/wire/index.ts';
import {
  decodeResponder,
  json,
  prefillResponder,
  type Responder,
  sleep,
  UpstreamDouble,
  waitFor,
  withProxy,
} from './helpers/upstream-double.ts';

setLogLevel('silent');

const body = { model: 'tiny', prompt: 'hello', max_tokens: 4, stream: true };

/** Runs `then` only once the caller hung up (a backend still busy when the client aborts). */
function afterHangUp(then: Responder): Responder {
  return async (rec, res) => {
    await new Promise((resolve) => res.once('close', resolve));
    await then(rec, res);
  };
}

function send(url: string, b: unknown, signal?: AbortSignal): Promise<Response> {
  return fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof b === 'string' ? b : JSON.stringify(b),
    ...(signal ? { signal } : {}),
  });
}

describe('client aborts', () => {
  test('pull: abort during prefill closes the P leg and D is never called', async () => {
    // P answers only once its caller hung up: the prefill is in progress when the client aborts.
    const p = await UpstreamDouble.start(afterHangUp(prefillResponder()));
    const d = await UpstreamDouble.start(decodeResponder());
    await withProxy([p], [d], {}, async (url, proxy) => {
      const ac = new AbortController();
      const pending = send(url, body, ac.signal).catch(() => 'aborted');
      await waitFor(() => p.completions().length === 1, 10_000, 'P leg');
      ac.abort();
      assert.equal(await pending, 'aborted');
      await waitFor(() => p.completions()[0]!.closedEarly, 10_000, 'P leg closed');
      // The proxy is done with the request once P's in-flight count is back to 0.
      await waitFor(() => proxy.pool.all('prefill')[0]!.inFlight === 0, 10_000, 'the request to end');
      assert.equal(d.completions().length, 0);
    });
  });

  test('pull: abort while D streams closes the D leg', async () => {
    const p = await UpstreamDouble.start(prefillResponder());
    const d = await UpstreamDouble.start(decodeResponder(50, 50));
    await withProxy([p], [d], {}, async (url) => {
      const ac = new AbortController();
      const res = await send(url, body, ac.signal);
      const reader = res.body!.getReader();
      await reader.read();
      ac.abort();
      await waitFor(() => d.completions()[0]?.closedEarly === true, 10_000, 'D leg closed');
    });
  });

  test('push (concurrent legs): one abort closes both legs', async () => {
    const info = { connector: 'NixlPushConnector', engine_id: 'e', side_channel_port: 1 };
    const p = await UpstreamDouble.start(afterHangUp(prefillResponder()), info);
    const d = await UpstreamDouble.start(
      afterHangUp(() => {}),
      { connector: 'NixlPushConnector' },
    );
    await withProxy([p], [d], {}, async (url) => {
      const ac = new AbortController();
      const pending = send(url, body, ac.signal).catch(() => 'aborted');
      await waitFor(() => p.completions().length === 1 && d.completions().length === 1, 10_000, 'both legs');
      ac.abort();
      await pending;
      await waitFor(
        () => p.completions()[0]!.closedEarly && d.completions()[0]!.closedEarly,
        10_000,
        'legs closed',
      );
    });
  });
});

describe('health checks', () => {
  test('a dead prefill stops receiving traffic and gets it again when it recovers', async () => {
    const p1 = await UpstreamDouble.start(prefillResponder());
    const p2 = await UpstreamDouble.start(prefillResponder());
    const d = await UpstreamDouble.start(decodeResponder());
    await withProxy([p1, p2], [d], { healthIntervalMs: 40, healthTimeoutMs: 500 }, async (url) => {
      const health = async () =>
        (await (await fetch(`${url}/health`)).json()) as { prefill_instances: number };
      assert.equal((await health()).prefill_instances, 2);
      p1.healthy = false;
      const deadline = Date.now() + 10_000;
      while ((await health()).prefill_instances !== 1 && Date.now() < deadline) await sleep(20);
      assert.equal((await health()).prefill_instances, 1);
      const before = p1.completions().length;
      for (let i = 0; i < 4; i++) await (await send(url, { ...body, stream: false })).json();
      assert.equal(p1.completions().length, before, 'no traffic to the dead prefill');
      assert.equal(p2.completions().length, 4);
      p1.healthy = true;
      while ((await health()).prefill_instances !== 2 && Date.now() < deadline + 10_000) await sleep(20);
      for (let i = 0; i < 4; i++) await (await send(url, { ...body, stream: false })).json();
      assert.equal(p1.completions().length, before + 2, 'round robin includes the recovered prefill');
    });
  });

  test('every decode marked down: the proxy tries them anyway (panic) and a success marks one up', async () => {
    const p = await UpstreamDouble.start(prefillResponder());
    const d = await UpstreamDouble.start(decodeResponder());
    d.healthy = false; // its GET /health fails, but it serves
    await withProxy([p], [d], { healthIntervalMs: 60_000, unhealthyIntervalMs: 0 }, async (url) => {
      const h = await fetch(`${url}/healthcheck`);
      assert.equal(h.status, 503);
      assert.deepEqual(await h.json(), { status: 'unavailable', prefill_instances: 1, decode_instances: 0 });
      const res = await send(url, body);
      assert.equal(res.status, 200);
      assert.match(await res.text(), /\[DONE\]/);
      assert.equal(d.completions().length, 1);
      const after = (await (await fetch(`${url}/healthcheck`)).json()) as { decode_instances: number };
      assert.equal(after.decode_instances, 1, 'marked up by the request it answered, not by a health round');
    });
  });

  test('no decode reachable gives 503 with a clear message after trying them', async () => {
    const p = await UpstreamDouble.start(prefillResponder());
    const d = await UpstreamDouble.start(decodeResponder());
    const deadUrl = d.url;
    await d.close();
    const proxy = await startProxy(resolveProxyOptions({ prefill: [p.url], decode: [deadUrl], port: 0 }));
    try {
      const res = await send(proxy.url, body);
      assert.equal(res.status, 503);
      const err = (await res.json()) as { error: { message: string; kvconnect_code: string; hint: string } };
      assert.equal(err.error.message, 'No healthy decode instance available');
      assert.equal(err.error.kvconnect_code, 'PROXY_NO_BACKEND');
      assert.ok(err.error.hint.length > 0);
    } finally {
      await proxy.close();
      await p.close();
    }
  });
});

describe('errors', () => {
  test('a P error reaches the client with its status and JSON; D is not called', async () => {
    const pErr = { error: { message: 'max_tokens must be at least 1', type: 'BadRequestError', code: 400 } };
    const p = await UpstreamDouble.start((_rec, res) => json(res, 400, pErr));
    const d = await UpstreamDouble.start(decodeResponder());
    await withProxy([p], [d], {}, async (url) => {
      const res = await send(url, body);
      assert.equal(res.status, 400);
      assert.deepEqual(await res.json(), pErr);
      assert.equal(d.completions().length, 0);
    });
  });

  test("a backend's non-JSON error body reaches the client as vLLM's error body, code the status", async () => {
    const p = await UpstreamDouble.start((_rec, res) => {
      res.writeHead(503, { 'content-type': 'text/plain' });
      res.end('upstream overloaded');
    });
    const d = await UpstreamDouble.start(decodeResponder());
    await withProxy([p], [d], { prefillFallback: false }, async (url) => {
      const res = await send(url, body);
      assert.equal(res.status, 503);
      assert.deepEqual(await res.json(), {
        error: {
          message: 'upstream overloaded',
          type: 'ServiceUnavailableError',
          param: null,
          code: 503,
          kvconnect_code: 'PROXY_UPSTREAM_ERROR',
        },
      });
    });
  });

  test('bad client bodies get 400 JSON; unknown routes 404; an unreachable P gives 502 with --no-prefill-fallback', async () => {
    const p = await UpstreamDouble.start(prefillResponder());
    const d = await UpstreamDouble.start(decodeResponder());
    await withProxy([p], [d], { healthIntervalMs: 60_000, prefillFallback: false }, async (url) => {
      for (const bad of ['{not json', '[1,2]', '"text"']) {
        const res = await send(url, bad);
        assert.equal(res.status, 400, bad);
        const err = (await res.json()) as { error: { kvconnect_code: string; type: string } };
        assert.equal(err.error.kvconnect_code, 'PROXY_BAD_REQUEST');
        assert.equal(err.error.type, 'BadRequestError');
      }
      const nf = await fetch(`${url}/v1/embeddings`, { method: 'POST', body: '{}' });
      assert.equal(nf.status, 404);
      assert.equal(
        ((await nf.json()) as { error: { kvconnect_code: string } }).error.kvconnect_code,
        'PROXY_NOT_FOUND',
      );
      await p.close();
      const res = await send(url, body);
      assert.equal(res.status, 502);
      assert.equal(
        ((await res.json()) as { error: { kvconnect_code: string } }).error.kvconnect_code,
        'PROXY_UPSTREAM_UNREACHABLE',
      );
      const h = (await (await fetch(`${url}/health`)).json()) as { prefill_instances: number };
      assert.equal(h.prefill_instances, 0, 'a refused connection marks the backend down at once');
    });
  });

  test('a backend running a connector without a P/D flow is logged at start and its requests refused (502)', async () => {
    const info = { connector: 'LMCacheConnectorV1', kv_connector: 'LMCacheConnectorV1' };
    const p = await UpstreamDouble.start(prefillResponder(), info);
    const d = await UpstreamDouble.start(decodeResponder(), info);
    const { result: proxy, records } = await captureLogs(() =>
      startProxy(
        resolveProxyOptions({ prefill: [p.url], decode: [d.url], port: 0, healthIntervalMs: 60_000 }),
      ),
    );
    try {
      const logged = records.find((r) => r.level === 'error' && r.message.includes(p.url));
      assert.ok(logged, records.map((r) => r.message).join('\n'));
      assert.match(logged.message, /runs LMCacheConnectorV1, for which the proxy has no P\/D flow/);
      assert.match(
        logged.message,
        /supported: NixlConnector, NixlPushConnector, MoRIIOConnector, OffloadingConnector/,
      );
      const res = await send(proxy.url, body);
      assert.equal(res.status, 502);
      const err = (await res.json()) as { error: { kvconnect_code: string; message: string; hint: string } };
      assert.equal(err.error.kvconnect_code, 'PROXY_CONNECTOR_UNSUPPORTED');
      assert.equal(
        err.error.message,
        `The prefill instance ${p.url} runs LMCacheConnectorV1, for which the proxy has no P/D flow (supported: NixlConnector, NixlPushConnector, MoRIIOConnector, OffloadingConnector)`,
      );
      assert.match(err.error.hint, /--kv-connector/);
      assert.equal(p.completions().length + d.completions().length, 0, 'neither leg was sent');
    } finally {
      await proxy.close();
      await p.close();
      await d.close();
    }
  });

  test('--kv-connector naming a connector without a P/D flow is refused at start', async () => {
    await assert.rejects(
      startProxy(
        resolveProxyOptions({
          prefill: ['http://127.0.0.1:1'],
          decode: ['http://127.0.0.1:1'],
          port: 0,
          kvConnector: 'P2pNcclConnector' as PdConnector,
        }),
      ),
      (e: Error & { code?: string; hint?: string }) =>
        e.code === 'PROXY_OPTIONS_INVALID' &&
        e.message.includes('"P2pNcclConnector"') &&
        (e.hint ?? '').includes('NixlConnector, NixlPushConnector, MoRIIOConnector'),
    );
  });

  test('startProxy without backends or discovery is rejected with a hint', async () => {
    await assert.rejects(
      startProxy(
        resolveProxyOptions({ prefill: [], decode: ['http://127.0.0.1:1'], port: 0, prefillFallback: false }),
      ),
      (e: Error & { code?: string; hint?: string }) =>
        e.code === 'PROXY_OPTIONS_INVALID' && /--prefill/.test(e.hint ?? ''),
    );
  });
});
