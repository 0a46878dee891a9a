/**
 * Soak: thousands of requests at concurrency 256 through the proxy to a NIXL prefill and
 * decode server (separate processes), mixed prompt lengths up to max_model_len, streaming
 * and not, ~8% cancelled by the client mid-stream, and a decode KV pool so small that the
 * decode engine preempts. Every request that was not cancelled is answered in full; sampled
 * answers equal a single engine's token ids; after each batch both servers hold no block;
 * RSS and heap after a GC stay flat over the second half. Prints the figures. 2000 requests (5
 * batches of 400) keep the suite short; `npm run bench -- soak` runs 5000 per side and records the curve.
 */
import assert from 'node:assert/strict';
import { after, it } from 'node:test';
import {
  type BatchResult,
  MiB,
  runBatch,
  type ServerStats,
  type SoakCluster,
  type SoakConfig,
  singleEngineTokens,
  soakWorkload,
  startSoakCluster,
} from './helpers/soak-harness.ts';

const CFG: SoakConfig = {
  requests: 2000,
  batches: 5,
  concurrency: 256,
  maxModelLen: 64,
  prefillBlocks: 512,
  decodeBlocks: 24,
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
    const [p, d] = r.servers as [ServerStats, ServerStats];
    console.log(
      `batch ${b + 1}: ${r.completed} answered, ${r.cancelled} cancelled, ${r.failures.length} failed in ${r.seconds.toFixed(1)} s; ` +
        `P rss ${mb(p.rss)} MiB heap ${mb(p.heapUsed)} MiB; D rss ${mb(d.rss)} MiB heap ${mb(d.heapUsed)} MiB; ` +
        `D preemptions ${d.numPreemptions}; KV usage P ${p.kvCacheUsage} D ${d.kvCacheUsage}`,
    );
  }
  const failures = results.flatMap((r) => r.failures);
  assert.deepEqual(failures.slice(0, 10), [], `${failures.length} requests were not answered as asked`);
  const cancelled = results.reduce((n, r) => n + r.cancelled, 0);
  const completed = results.reduce((n, r) => n + r.completed, 0);
  assert.equal(completed + cancelled, CFG.requests, 'every request was answered or cancelled');
  assert.ok(cancelled > 0, 'some requests were cancelled mid-stream');
  const last = results.at(-1)!;
  assert.ok(last.servers[1]!.numPreemptions > 0, 'the decode engine preempted (KV pool nearly full)');

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

  // Flat: from the end of the first half (RSS settles over the first ~1000 requests: heap
  // sizing, allocator arenas, socket buffers) to the last batch.
  const first = results[Math.floor(CFG.batches / 2) - 1]!;
  for (const [i, side] of ['prefill', 'decode'].entries()) {
    const [a, z] = [first.servers[i]!, last.servers[i]!];
    console.log(
      `${side}: RSS ${mb(a.rss)} → ${mb(z.rss)} MiB, heap ${mb(a.heapUsed)} → ${mb(z.heapUsed)} MiB`,
    );
    assert.ok(z.rss - a.rss < 0.1 * a.rss + 8 * MiB, `${side} RSS grew ${mb(z.rss - a.rss)} MiB`);
    assert.ok(
      z.heapUsed - a.heapUsed < 0.1 * a.heapUsed + 4 * MiB,
      `${side} heap grew ${mb(z.heapUsed - a.heapUsed)} MiB`,
    );
  }
});
