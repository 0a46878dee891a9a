/**
 * The proxy under an overloaded backend: a missed health check (an error answer or a probe
 * past its deadline) does not take a busy backend out of rotation; three in a row do, and
 * one good answer brings it back; probes that time out while the backend keeps answering
 * proxied requests never count. Checks are run by hand so nothing depends on timing.
 */
import assert from 'node:assert/strict';
import { after, it } from 'node:test';
import { resolveProxyOptions, startProxy } from '../../src/proxy/proxy-server.ts';
import { waitUntil } from '../helpers/wait-until.ts';
import { decodeResponder, prefillResponder, UpstreamDouble } from '../proxy/helpers/upstream-double.ts';

const doubles: UpstreamDouble[] = [];

/** Status of one small completion through the proxy. */
async function status(proxyUrl: string): Promise<number> {
  const res = await fetch(`${proxyUrl}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', prompt: 'hello', max_tokens: 4 }),
  });
  await res.arrayBuffer();
  return res.status;
}
after(async () => {
  for (const d of doubles) await d.close();
});

it('a backend is marked down after three failed health checks in a row, not after one', async () => {
  const p = await UpstreamDouble.start(prefillResponder());
  const d = await UpstreamDouble.start(decodeResponder());
  doubles.push(p, d);
  const proxy = await startProxy(
    resolveProxyOptions({ prefill: [p.url], decode: [d.url], port: 0, healthIntervalMs: 3_600_000 }),
  );
  const send = () => status(proxy.url);
  try {
    assert.equal(await send(), 200);
    p.healthy = false;
    for (const missed of [1, 2]) {
      await proxy.pool.checkAll();
      assert.equal(
        proxy.pool.healthy('prefill').length,
        1,
        `still in rotation after ${missed} missed check(s)`,
      );
      assert.equal(await send(), 200, 'and still served');
    }
    await proxy.pool.checkAll();
    assert.equal(proxy.pool.healthy('prefill').length, 0, 'out after three in a row');
    // Every prefill server is marked down: the next request tries it anyway (panic routing),
    // and since it answers requests, that answer marks it up again.
    const legs = p.completions().length;
    assert.equal(await send(), 200);
    assert.equal(p.completions().length, legs + 1, 'the prefill server marked down was tried');
    assert.equal(proxy.pool.healthy('prefill').length, 1, 'and marked up by its answer');
    await proxy.pool.checkAll();
    assert.equal(proxy.pool.healthy('prefill').length, 1, 'one missed check after that does not count');
    p.healthy = true;
    await proxy.pool.checkAll();
    assert.equal(proxy.pool.healthy('prefill').length, 1, 'back after one good answer');
    assert.equal(await send(), 200);
  } finally {
    await proxy.close();
  }
});

it('a backend whose /health is too slow but which answers requests stays in rotation', async () => {
  const p = await UpstreamDouble.start(prefillResponder());
  const d = await UpstreamDouble.start(decodeResponder());
  doubles.push(p, d);
  const proxy = await startProxy(
    resolveProxyOptions({
      prefill: [p.url],
      decode: [d.url],
      port: 0,
      healthIntervalMs: 3_600_000,
      healthTimeoutMs: 100,
    }),
  );
  const send = () => status(proxy.url);
  try {
    // Under load even the start-up probe may miss 50 ms: wait until it is in rotation.
    await waitUntil('the prefill to pass a health check', async () => {
      await proxy.pool.checkAll();
      return proxy.pool.healthy('prefill').length === 1;
    });
    p.healthDelayMs = 500;
    for (let round = 0; round < 5; round++) {
      assert.equal(await send(), 200);
      await proxy.pool.checkAll();
      assert.equal(proxy.pool.healthy('prefill').length, 1, `round ${round}: busy, not dead`);
    }
    for (let round = 0; round < 3; round++) await proxy.pool.checkAll();
    assert.equal(proxy.pool.healthy('prefill').length, 0, 'silent and slow for three rounds: out');
  } finally {
    await proxy.close();
  }
});
