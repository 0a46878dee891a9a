/**
 * `n > 1` through the proxy on a NixlConnector pair, prompts sharing prefixes, several
 * requests in flight: every request answers 200 with the plain server's token ids for every
 * choice, no KV transfer fails, and P's KV usage returns to 0 (no choice's blocks stay
 * pinned). D's choices share one hand-off from P: if each of them read P's blocks, the first
 * reader's completion notice freed them and a later reader's READ was refused
 * (KV_LOAD_FAILED).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readMetrics } from '../../src/demo/metrics.ts';
import { familyPrefix } from '../../src/demo/workload.ts';
import { postJson, startCluster, waitFor } from './helpers/cluster.ts';

interface Choice {
  index: number;
  logprobs: { tokens: string[] };
}

async function choices(url: string, body: Record<string, unknown>): Promise<string[][]> {
  const res = await postJson(`${url}/v1/completions`, body);
  if (res.status !== 200) assert.fail(`${url}: ${res.status} ${await res.text()}`);
  const json = (await res.json()) as { choices: Choice[] };
  return json.choices.sort((a, b) => a.index - b.index).map((c) => c.logprobs.tokens);
}

test('n: 2 with shared prefixes under load: every choice as a plain server, no failed load, P frees all', async () => {
  const cluster = await startCluster('NixlConnector', { kvLoadFailurePolicy: 'fail' });
  try {
    const dBefore = await readMetrics(cluster.decode.url);
    const bodies = Array.from({ length: 16 }, (_, i) => ({
      model: cluster.model,
      prompt: `${familyPrefix(i % 2, 300)} verse ${i}: And the LORD said unto`,
      max_tokens: 6,
      n: 2,
      temperature: 0.8,
      seed: 11 + i,
      logprobs: 0,
      return_tokens_as_token_ids: true,
    }));
    // Four in flight at a time, as a client pool would send them.
    const viaProxy: string[][][] = [];
    for (let i = 0; i < bodies.length; i += 4) {
      viaProxy.push(...(await Promise.all(bodies.slice(i, i + 4).map((b) => choices(cluster.proxy.url, b)))));
    }
    for (const [i, body] of bodies.entries()) {
      const plain = await choices(cluster.reference.url, body);
      assert.equal(viaProxy[i]!.length, 2);
      assert.deepEqual(
        viaProxy[i],
        plain,
        `request ${i}: token ids of the choices differ from the plain server's`,
      );
    }
    const dAfter = await readMetrics(cluster.decode.url);
    assert.equal(dAfter.failedTransfers - dBefore.failedTransfers, 0, 'a KV transfer failed');
    await waitFor(
      async () => (await readMetrics(cluster.prefill.url)).kvUsage === 0,
      5000,
      "P's kv_cache_usage_perc to return to 0",
    );
  } finally {
    await cluster.close();
  }
});
