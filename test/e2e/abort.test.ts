/**
 * A client that aborts a streamed request through the proxy leaves no KV blocks pinned on P
 * or D (after P's lease at the latest: the test uses a 2 s kv_lease_duration).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readMetrics } from '../../src/demo/metrics.ts';
import { familyPrefix } from '../../src/demo/workload.ts';
import { postJson, startCluster, waitFor } from './helpers/cluster.ts';

const LEASE_S = 2;

test('a client abort through the proxy frees the KV blocks on both servers', async () => {
  const cluster = await startCluster('NixlConnector', { kvLeaseDuration: LEASE_S });
  try {
    const controller = new AbortController();
    const res = await postJson(
      `${cluster.proxy.url}/v1/completions`,
      {
        model: cluster.model,
        prompt: `${familyPrefix(7, 600)}And he said,`,
        max_tokens: 700,
        ignore_eos: true,
        temperature: 0,
        stream: true,
      },
      controller.signal,
    );
    assert.equal(res.status, 200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const first = await reader.read();
    assert.equal(first.done, false);
    const d = await readMetrics(cluster.decode.url);
    assert.ok(d.kvUsage > 0 && d.running === 1, 'D should be decoding the request when the client leaves');
    controller.abort();
    await reader.cancel().catch(() => undefined);
    for (const [name, url] of [
      ['P', cluster.prefill.url],
      ['D', cluster.decode.url],
    ] as const) {
      await waitFor(
        async () => {
          const m = await readMetrics(url);
          return m.kvUsage === 0 && m.running === 0 && m.waiting === 0;
        },
        (LEASE_S + 5) * 1000,
        `${name}'s KV usage and running requests to return to 0`,
      );
    }
    // Both servers keep serving after the abort.
    const again = await postJson(`${cluster.proxy.url}/v1/completions`, {
      model: cluster.model,
      prompt: 'after the abort',
      max_tokens: 4,
      temperature: 0,
    });
    assert.equal(again.status, 200);
    await again.json();
  } finally {
    await cluster.close();
  }
});
