/**
 * The P/D end-to-end checks shared by the pull and push test files: outputs through the proxy
 * equal the plain server's (completions and chat, streamed and not), D computes at most one
 * prompt token per request, and P's KV usage returns to 0.
 */
import assert from 'node:assert/strict';
import { readMetrics } from '../../src/demo/metrics.ts';
import { familyPrefix } from '../../src/demo/workload.ts';
import { type Cluster, postJson, streamedText, waitFor } from './helpers.ts';

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
      body: { prompt: `${familyPrefix(i, 200)}Question: what now?\nAnswer:`, max_tokens: 12 },
    });
    out.push({
      route: '/v1/chat/completions',
      stream,
      body: { messages: [{ role: 'user', content: `${familyPrefix(i + 2, 150)}Say more.` }], max_tokens: 12 },
    });
  }
  return out;
}

async function answer(baseUrl: string, c: Case): Promise<string> {
  const res = await postJson(`${baseUrl}${c.route}`, {
    model: 'tiny',
    temperature: 0,
    stream: c.stream,
    ...c.body,
  });
  if (res.status !== 200) assert.fail(`${baseUrl}${c.route}: ${res.status} ${await res.text()}`);
  if (c.stream) return streamedText(res);
  const json = (await res.json()) as { choices: Array<{ text?: string; message?: { content: string } }> };
  const choice = json.choices[0];
  return choice?.text ?? choice?.message?.content ?? '';
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
    const viaProxy = await answer(cluster.proxy.url, c);
    const plain = await answer(cluster.reference.url, c);
    assert.equal(viaProxy.length > 0, true, `empty output for ${c.route} stream=${c.stream}`);
    assert.equal(
      viaProxy,
      plain,
      `${c.route} stream=${c.stream}: proxy output differs from the plain server's`,
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
