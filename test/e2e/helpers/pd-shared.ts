/**
 * The P/D end-to-end checks shared by the pull and push test files: outputs through the proxy
 * have the plain server's token ids (completions and chat, streamed and not), D computes at
 * most one prompt token per request, and P's KV usage returns to 0.
 */
import assert from 'node:assert/strict';
import { readMetrics } from '../../../src/demo/metrics.ts';
import { familyPrefix } from '../../../src/demo/workload.ts';
import { type Cluster, generatedTokenIds, postJson, waitFor } from './cluster.ts';

interface Case {
  route: '/v1/completions' | '/v1/chat/completions';
  stream: boolean;
  body: Record<string, unknown>;
}

function cases(): Case[] {
  const out: Case[] = [];
  for (const [i, stream] of [false, true].entries()) {
    out.push({
      route: '/v1/completions',
      stream,
      body: { prompt: `${familyPrefix(i, 700)}And the LORD said unto`, max_tokens: 12 },
    });
    out.push({
      route: '/v1/chat/completions',
      stream,
      body: {
        messages: [{ role: 'user', content: `${familyPrefix(i + 2, 600)}Then answered he, and said,` }],
        max_tokens: 12,
      },
    });
  }
  return out;
}

async function answer(cluster: Cluster, baseUrl: string, c: Case): Promise<number[]> {
  const res = await postJson(`${baseUrl}${c.route}`, {
    model: cluster.model,
    temperature: 0,
    stream: c.stream,
    logprobs: c.route === '/v1/completions' ? 0 : true,
    return_tokens_as_token_ids: true,
    ...c.body,
  });
  if (res.status !== 200) assert.fail(`${baseUrl}${c.route}: ${res.status} ${await res.text()}`);
  return generatedTokenIds(res, c.stream);
}

export interface PdFigures {
  requests: number;
  /** Prompt tokens D computed itself (the rest came from P). */
  decodeComputed: number;
  decodeLoaded: number;
  failedTransfers: number;
}

/** Outputs through the proxy equal the plain server's and P's KV usage returns to 0. */
export async function checkDisaggregatedMatchesPlain(cluster: Cluster): Promise<PdFigures> {
  const dBefore = await readMetrics(cluster.decode.url);
  const pBefore = await readMetrics(cluster.prefill.url);
  const all = cases();
  for (const c of all) {
    const viaProxy = await answer(cluster, cluster.proxy.url, c);
    const plain = await answer(cluster, cluster.reference.url, c);
    assert.equal(viaProxy.length, 12, `${c.route} stream=${c.stream}: expected 12 tokens`);
    assert.deepEqual(
      viaProxy,
      plain,
      `${c.route} stream=${c.stream}: proxy token ids differ from the plain server's`,
    );
  }
  const dAfter = await readMetrics(cluster.decode.url);
  await waitFor(
    async () => (await readMetrics(cluster.prefill.url)).kvUsage === 0,
    5000,
    "P's kv_cache_usage_perc to return to 0",
  );
  const pAfter = await readMetrics(cluster.prefill.url);
  assert.ok(
    pAfter.kvBytes + dAfter.kvBytes - pBefore.kvBytes - dBefore.kvBytes > 0,
    'no KV bytes transferred',
  );
  return {
    requests: all.length,
    decodeComputed: dAfter.promptTokens - dBefore.promptTokens,
    decodeLoaded: dAfter.externalHits - dBefore.externalHits,
    failedTransfers:
      dAfter.failedTransfers - dBefore.failedTransfers + pAfter.failedTransfers - pBefore.failedTransfers,
  };
}

/** D computed at most one prompt token per request and loaded the rest from P. */
export function assertDecodeOnlyComputedLastToken(f: PdFigures): void {
  assert.equal(f.failedTransfers, 0, `${f.failedTransfers} KV transfer(s) failed`);
  assert.ok(
    f.decodeComputed <= f.requests,
    `D computed ${f.decodeComputed} prompt tokens for ${f.requests} requests`,
  );
  assert.ok(f.decodeLoaded > 100 * f.requests, `D loaded only ${f.decodeLoaded} tokens from P`);
}
