import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import {
  decodeResponder,
  json,
  prefillResponder,
  sleep,
  UpstreamDouble,
  waitFor,
  withProxy,
} from './helpers/upstream-double.ts';

setLogLevel('silent');

const body = { model: 'tiny', prompt: 'hello', max_tokens: 4 };

function send(url: string, b: unknown = body): Promise<Response> {
  return fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-id': 'req-1' },
    body: JSON.stringify(b),
  });
}

async function metric(url: string, name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

/** D received the client's body as it was: no kv_transfer_params, the same max_tokens. */
function assertPlain(d: UpstreamDouble): void {
  const legs = d.completions();
  assert.equal(legs.length, 1);
  assert.deepEqual(legs[0]!.body, body);
  assert.equal(legs[0]!.headers['x-request-id'], 'req-1');
}

describe('prefill fallback', () => {
  test('P answers 5xx: the request is served by D alone, counted and logged', async () => {
    const p = await UpstreamDouble.start((_rec, res) => json(res, 500, { error: { message: 'boom' } }));
    const d = await UpstreamDouble.start(decodeResponder());
    await withProxy([p], [d], {}, async (url) => {
      const res = await send(url);
      assert.equal(res.status, 200);
      assert.deepEqual(await res.json(), { id: 'cmpl-d', choices: [{ index: 0, text: 'decoded' }] });
      assertPlain(d);
      assert.equal(await metric(url, 'kvconnect:proxy_prefill_fallbacks_total', 'reason="status"'), 1);
      assert.equal(await metric(url, 'kvconnect:proxy_requests_total', 'flow="decode_only"'), 1);
    });
  });

  test('P refuses connections: fallback, and P is marked down (a later request tries it again first)', async () => {
    const p = await UpstreamDouble.start(prefillResponder());
    const d = await UpstreamDouble.start(decodeResponder());
    await withProxy([p], [d], { healthIntervalMs: 60_000, unhealthyIntervalMs: 0 }, async (url) => {
      await p.close();
      assert.equal((await send(url)).status, 200);
      assert.equal((await send(url)).status, 200);
      assert.equal(d.completions().length, 2);
      // The second request tried the prefill server marked down (panic), was refused, fell back.
      assert.equal(await metric(url, 'kvconnect:proxy_prefill_fallbacks_total', 'reason="connect"'), 2);
      const health = (await (await fetch(`${url}/health`)).json()) as Record<string, unknown>;
      assert.deepEqual(health, { status: 'ok', prefill_instances: 0, decode_instances: 1 });
    });
  });

  test('every P marked down: one request at a time tries it, the others fall back at once', async () => {
    // P fails its health checks but serves, slowly: the first request's trial is still running
    // when the next ones arrive.
    const p = await UpstreamDouble.start(prefillResponder(300));
    p.healthy = false;
    const d = await UpstreamDouble.start(decodeResponder());
    await withProxy([p], [d], { healthIntervalMs: 60_000, unhealthyIntervalMs: 0 }, async (url, proxy) => {
      await proxy.pool.checkAll();
      assert.equal(proxy.pool.healthy('prefill').length, 0);
      const first = send(url);
      await sleep(50);
      const rest = await Promise.all([send(url), send(url)]);
      assert.deepEqual(
        rest.map((r) => r.status),
        [200, 200],
      );
      assert.equal(p.completions().length, 1, 'only the first request tried the prefill server');
      assert.equal(await metric(url, 'kvconnect:proxy_prefill_fallbacks_total', 'reason="no_prefill"'), 2);
      assert.equal((await first).status, 200);
      assert.equal(proxy.pool.healthy('prefill').length, 1, 'its answer marked it up');
      assert.equal(await metric(url, 'kvconnect:proxy_requests_total', 'flow="disaggregated"'), 1);
    });
  });

  test('a retry that finds the only P down and on trial for another request falls back, not a 500', async () => {
    // A's decode leg fails (a KV load, retried by prefilling again) only once P was marked down
    // and B took it on trial: A's second prefill finds no candidate left.
    const gate = () => {
      let resolve = () => {};
      const promise = new Promise<void>((r) => {
        resolve = r;
      });
      return { promise, resolve };
    };
    const gates = { a: gate(), b: gate() };
    const pServe = prefillResponder();
    const p = await UpstreamDouble.start(async (rec, res) => {
      if (p.completions().length === 2) await gates.b.promise; // B's trial holds P
      await pServe(rec, res);
    });
    const dServe = decodeResponder();
    const d = await UpstreamDouble.start(async (rec, res) => {
      if (d.completions().length > 1) return dServe(rec, res);
      await gates.a.promise;
      json(res, 500, { error: { message: 'load failed', code: 500, kvconnect_code: 'KV_LOAD_FAILED' } });
    });
    await withProxy([p], [d], { healthIntervalMs: 60_000, unhealthyIntervalMs: 0 }, async (url, proxy) => {
      const a = send(url);
      await waitFor(() => d.completions().length === 1, 10_000, "A's decode leg");
      proxy.pool.markDown(proxy.pool.all('prefill')[0]!, 'test');
      const b = send(url);
      await waitFor(() => p.completions().length === 2, 10_000, "B's trial on P");
      gates.a.resolve();
      const answer = await a;
      assert.equal(answer.status, 200, await answer.clone().text());
      assert.deepEqual(await answer.json(), { id: 'cmpl-d', choices: [{ index: 0, text: 'decoded' }] });
      assert.equal(p.completions().length, 2, 'A did not prefill again');
      assert.deepEqual(d.completions()[1]!.body, body, 'A went to D alone, plainly');
      assert.equal(await metric(url, 'kvconnect:proxy_prefill_fallbacks_total', 'reason="no_prefill"'), 1);
      gates.b.resolve();
      assert.equal((await b).status, 200);
    });
  });

  test('P hangs past --prefill-timeout-ms: fallback; the P leg is closed', async () => {
    const p = await UpstreamDouble.start(prefillResponder(5_000));
    const d = await UpstreamDouble.start(decodeResponder());
    await withProxy([p], [d], { prefillTimeoutMs: 200 }, async (url) => {
      const res = await send(url);
      assert.equal(res.status, 200);
      assertPlain(d);
      assert.equal(await metric(url, 'kvconnect:proxy_prefill_fallbacks_total', 'reason="timeout"'), 1);
      for (let i = 0; i < 100 && !p.completions()[0]?.closedEarly; i++) await sleep(20);
      assert.ok(p.completions()[0]!.closedEarly, 'the proxy hung up on P');
    });
  });

  test('concurrent flows (NIXL push): the D leg waiting for P is aborted and D is asked again, plainly', async () => {
    const p = await UpstreamDouble.start((_rec, res) => json(res, 503, { error: { message: 'overloaded' } }));
    const d = await UpstreamDouble.start(async (rec, res) => {
      if (rec.body['kv_transfer_params']) {
        await sleep(5_000); // waits for a push that never comes
        if (!res.destroyed) json(res, 500, { error: { message: 'should have been aborted' } });
        return;
      }
      json(res, 200, { id: 'cmpl-d', choices: [{ index: 0, text: 'decoded' }] });
    });
    const push = { engineId: 'e', port: 5600 };
    await withProxy([p], [d], { kvConnector: 'NixlPushConnector', push }, async (url) => {
      const res = await send(url);
      assert.equal(res.status, 200);
      const legs = d.completions();
      assert.equal(legs.length, 2);
      assert.ok(legs[0]!.body['kv_transfer_params'], 'the push leg went first');
      assert.deepEqual(legs[1]!.body, body);
      for (let i = 0; i < 100 && !legs[0]!.closedEarly; i++) await sleep(20);
      assert.ok(legs[0]!.closedEarly, 'the push leg was aborted');
    });
  });

  test('no --prefill at all: every request is a plain one to a decode instance (not counted as a fallback)', async () => {
    const d = await UpstreamDouble.start(decodeResponder());
    await withProxy([], [d], {}, async (url) => {
      assert.equal((await send(url)).status, 200);
      assertPlain(d);
      assert.equal(await metric(url, 'kvconnect:proxy_requests_total', 'flow="decode_only"'), 1);
      assert.equal(await metric(url, 'kvconnect:proxy_prefill_fallbacks_total', 'reason="no_prefill"'), 0);
    });
  });

  test('--no-prefill-fallback keeps the errors: the 5xx and 4xx of P are relayed as before', async () => {
    const p = await UpstreamDouble.start((rec, res) =>
      rec.body['prompt'] === 'bad'
        ? json(res, 400, { error: { message: 'bad prompt' } })
        : json(res, 500, {}),
    );
    const d = await UpstreamDouble.start(decodeResponder());
    await withProxy([p], [d], { prefillFallback: false }, async (url) => {
      assert.equal((await send(url)).status, 500);
      assert.equal((await send(url, { ...body, prompt: 'bad' })).status, 400);
      assert.equal(d.completions().length, 0);
    });
    const p2 = await UpstreamDouble.start((rec, res) =>
      json(res, 400, { error: { message: String(rec.path) } }),
    );
    const d2 = await UpstreamDouble.start(decodeResponder());
    await withProxy([p2], [d2], {}, async (url) => {
      assert.equal((await send(url)).status, 400, "a client error is the client's: no fallback");
      assert.equal(d2.completions().length, 0);
    });
  });

  test('a connection reset before any response is retried once (a keep-alive connection closed under it)', async () => {
    let calls = 0;
    const d = await UpstreamDouble.start((_rec, res) => {
      calls += 1;
      if (calls === 1) res.socket?.destroy();
      else json(res, 200, { id: 'cmpl-d', choices: [{ index: 0, text: 'decoded' }] });
    });
    await withProxy([], [d], { healthIntervalMs: 60_000 }, async (url) => {
      assert.equal((await send(url)).status, 200);
      assert.equal(calls, 2);
      const health = (await (await fetch(`${url}/health`)).json()) as Record<string, unknown>;
      assert.equal(health['decode_instances'], 1, 'not marked down');
    });
  });
});
