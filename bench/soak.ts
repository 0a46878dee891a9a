/**
 * Soak: the seeded P/D workload of test/faults/soak.test.ts (mixed prompt lengths up to
 * max_model_len, ~8% cancelled mid-stream, a decode pool small enough to preempt) at
 * concurrency 256, alternating rounds through the proxy to a NIXL prefill + decode pair
 * and, as the baseline of the same run, the same requests to one engine alone. The servers
 * live for the whole run, so the P/D pair's RSS and heap after each round (after a GC) are
 * the memory curve. Reports medians (min–max) of throughput and latency and the pairwise ratio.
 *   npm run bench -- soak [--rounds 5] [--requests 1000] [--concurrency 256]
 */
import { setLogLevel } from '../src/logging/logger.ts';
import { nearestRankPercentile } from '../src/util/percentile.ts';
import {
  type BatchResult,
  MiB,
  runBatch,
  type SoakConfig,
  soakWorkload,
  startPlainServer,
  startSoakCluster,
} from '../test/faults/helpers/soak-harness.ts';
import { benchArgs, positiveInteger } from './_args.ts';
import { alternate, fmt, json, loadAverage, pairwiseRatio, summarize } from './_rounds.ts';

const latency = (xs: readonly number[], p: number): number =>
  nearestRankPercentile(
    [...xs].sort((a, b) => a - b),
    p,
  );

interface Round {
  reqPerS: number;
  p50Ms: number;
  p99Ms: number;
  failed: number;
  result: BatchResult;
}

function round(r: BatchResult): Round {
  return {
    reqPerS: (r.completed + r.cancelled) / r.seconds,
    p50Ms: latency(r.latenciesMs, 50),
    p99Ms: latency(r.latenciesMs, 99),
    failed: r.failures.length,
    result: r,
  };
}

export async function main(args: string[]): Promise<void> {
  setLogLevel('warn');
  const {
    rounds,
    requests: perRound,
    concurrency,
  } = benchArgs(
    'soak',
    {
      rounds: positiveInteger(5, 'rounds, the two sides alternating'),
      requests: positiveInteger(1000, 'requests per side and round'),
      concurrency: positiveInteger(256, 'requests in flight'),
    },
    args,
  );
  const cfg: SoakConfig = {
    requests: rounds * perRound,
    batches: rounds,
    concurrency,
    maxModelLen: 128,
    prefillBlocks: 512,
    decodeBlocks: 48,
    decodeMaxNumSeqs: 128,
    cancelFraction: 0.08,
    checkEvery: Number.POSITIVE_INFINITY,
    seed: 17,
  };
  const items = soakWorkload(cfg);
  const cluster = await startSoakCluster(cfg);
  const plain = await startPlainServer(cfg);
  const curve: string[] = [];
  const load: number[] = [];
  let series: { a: Round[]; b: Round[] } = { a: [], b: [] };
  const batch = (k: number) => items.slice(k * perRound, (k + 1) * perRound);
  try {
    series = await alternate(
      rounds,
      async (k) => {
        load.push(loadAverage());
        const r = round(await runBatch(cluster, batch(k), cfg, k * perRound));
        const [p, d] = r.result.servers;
        curve.push(
          `| ${(k + 1) * perRound} | ${(p!.rss / MiB).toFixed(1)} | ${(p!.heapUsed / MiB).toFixed(1)} | ${(d!.rss / MiB).toFixed(1)} | ${(d!.heapUsed / MiB).toFixed(1)} | ${d!.numPreemptions} |`,
        );
        console.error(`round ${k + 1}/${rounds}: P/D ${r.reqPerS.toFixed(1)} req/s`);
        return r;
      },
      async (k) => {
        const r = round(await runBatch(plain, batch(k), cfg, k * perRound));
        console.error(`round ${k + 1}/${rounds}: alone ${r.reqPerS.toFixed(1)} req/s`);
        return r;
      },
    );
  } finally {
    await cluster.close();
    await plain.close();
  }
  const { a: pd, b: alone } = series;
  const ratio = pairwiseRatio(
    alone.map((r) => r.reqPerS),
    pd.map((r) => r.reqPerS),
  );
  const failures = [...pd, ...alone].reduce((n, r) => n + r.failed, 0);
  const of = (rs: Round[], f: (r: Round) => number) => summarize(rs.map(f));
  console.log(
    `\nSoak: ${rounds} rounds × ${perRound} requests at concurrency ${cfg.concurrency}, tiny, max_model_len ${cfg.maxModelLen}, ~8% cancelled; load average ${fmt(summarize(load), 1)}`,
  );
  console.log('| target | req/s | p50 latency (ms) | p99 latency (ms) | failed |');
  console.log('|---|---|---|---|---|');
  for (const [name, rs] of [
    ['P/D through the proxy', pd],
    ['one engine alone', alone],
  ] as const) {
    console.log(
      `| ${name} | ${fmt(
        of(rs, (r) => r.reqPerS),
        1,
      )} | ${fmt(of(rs, (r) => r.p50Ms))} | ${fmt(of(rs, (r) => r.p99Ms))} | ${rs.reduce((n, r) => n + r.failed, 0)} |`,
    );
  }
  console.log(`ratio P/D ÷ alone (req/s, pairwise per round): ${fmt(ratio, 2)}`);
  console.log('\nP/D servers after each round, idle, after a GC (MiB):');
  console.log('| requests | P rss | P heap | D rss | D heap | D preemptions |');
  console.log('|---|---|---|---|---|---|');
  for (const line of curve) console.log(line);
  const first = pd[0]!.result.servers;
  const last = pd.at(-1)!.result.servers;
  console.log(
    JSON.stringify({
      bench: 'soak',
      rounds,
      requests_per_round: perRound,
      concurrency: cfg.concurrency,
      load_average: json(summarize(load), 2),
      pd_req_per_s: json(
        of(pd, (r) => r.reqPerS),
        2,
      ),
      alone_req_per_s: json(
        of(alone, (r) => r.reqPerS),
        2,
      ),
      pd_over_alone: json(ratio, 3),
      pd_p99_ms: json(
        of(pd, (r) => r.p99Ms),
        0,
      ),
      alone_p99_ms: json(
        of(alone, (r) => r.p99Ms),
        0,
      ),
      failed_requests: failures,
      prefill_rss_growth_mib: (last[0]!.rss - first[0]!.rss) / MiB,
      decode_rss_growth_mib: (last[1]!.rss - first[1]!.rss) / MiB,
      prefill_heap_growth_mib: (last[0]!.heapUsed - first[0]!.heapUsed) / MiB,
      decode_heap_growth_mib: (last[1]!.heapUsed - first[1]!.heapUsed) / MiB,
      decode_preemptions: last[1]!.numPreemptions,
    }),
  );
}
