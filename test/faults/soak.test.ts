/**
 * Soak: thousands of requests at concurrency 256 through the proxy to a NIXL prefill and
 * decode server (separate processes), mixed prompt lengths up to max_model_len, streaming
 * and not, ~8% cancelled by the client mid-stream, and a decode KV pool so small that the
 * decode engine preempts. Every request that was not cancelled is answered in full; sampled
 * answers equal a single engine's token ids; after each batch both servers hold no block;
 * RSS and heap after a GC stay flat from the first batch to the last. Prints the figures.
 */
import assert from 'node:assert/strict';
import { after, it } from 'node:test';
import {
  type BatchResult,
  MiB,
  runBatch,
  type SoakCluster,
  type SoakConfig,
  singleEngineTokens,
  soakWorkload,
  startSoakCluster,
} from './soak-harness.ts';

const CFG: SoakConfig = {
  requests: 2000,
  batches: 4,
  concurrency: 256,
  maxModelLen: 128,
  prefillBlocks: 512,
  decodeBlocks: 48,
  decodeMaxNumSeqs: 128,
  cancelFraction: 0.08,
  checkEvery: 25,
  seed: 17,
};

let cluster: SoakCluster | null = null;
after(async () => {
  await cluster?.close();
});

const mb = (b: number) => (b / MiB).toFixed(1);

it(`soak: ${CFG.requests} requests at concurrency ${CFG.concurrency} through the P/D proxy, with cancellations and preemptions`, {
  timeout: 600_000,
}, async () => {
  cluster = await startSoakCluster(CFG);
  const items = soakWorkload(CFG);
  const per = Math.ceil(items.length / CFG.batches);
  const results: BatchResult[] = [];
  for (let b = 0; b < CFG.batches; b++) {
    const r = await runBatch(cluster, items.slice(b * per, (b + 1) * per), CFG, b * per);
    results.push(r);
    console.log(
      `batch ${b + 1}: ${r.completed} answered, ${r.cancelled} cancelled, ${r.failures.length} failed in ${r.seconds.toFixed(1)} s; ` +
        `P rss ${mb(r.prefill.rss)} MiB heap ${mb(r.prefill.heapUsed)} MiB; D rss ${mb(r.decode.rss)} MiB heap ${mb(r.decode.heapUsed)} MiB; ` +
        `D preemptions ${r.decode.numPreemptions}; KV usage P ${r.prefill.kvCacheUsage} D ${r.decode.kvCacheUsage}`,
    );
  }
  const failures = results.flatMap((r) => r.failures);
  assert.deepEqual(failures.slice(0, 10), [], `${failures.length} requests were not answered as asked`);
  const cancelled = results.reduce((n, r) => n + r.cancelled, 0);
  const completed = results.reduce((n, r) => n + r.completed, 0);
  assert.equal(completed + cancelled, CFG.requests, 'every request was answered or cancelled');
  assert.ok(cancelled > 0, 'some requests were cancelled mid-stream');
  const last = results.at(-1)!;
  assert.ok(last.decode.numPreemptions > 0, 'the decode engine preempted (KV pool nearly full)');

  const checked = results.flatMap((r) => r.checked);
  const expected = await singleEngineTokens(CFG, checked);
  checked.forEach((c, i) => {
    assert.deepEqual(
      c.tokenIds,
      expected[i],
      `sampled request ${i} (${c.prompt.length} tokens) equals one engine`,
    );
  });
  assert.ok(
    checked.length >= CFG.requests / CFG.checkEvery / 2,
    `${checked.length} answers checked token by token`,
  );

  // Flat: the last batch ends where the first did, give or take allocator noise.
  const first = results[0]!;
  for (const side of ['prefill', 'decode'] as const) {
    const grewRss = last[side].rss - first[side].rss;
    const grewHeap = last[side].heapUsed - first[side].heapUsed;
    console.log(
      `${side}: RSS ${mb(first[side].rss)} → ${mb(last[side].rss)} MiB, heap ${mb(first[side].heapUsed)} → ${mb(last[side].heapUsed)} MiB`,
    );
    assert.ok(grewRss < 0.15 * first[side].rss + 16 * MiB, `${side} RSS grew ${mb(grewRss)} MiB`);
    assert.ok(grewHeap < 0.15 * first[side].heapUsed + 4 * MiB, `${side} heap grew ${mb(grewHeap)} MiB`);
  }
});
