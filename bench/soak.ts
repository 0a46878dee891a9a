/**
 * Soak: the seeded P/D workload of test/faults/soak.test.ts (mixed prompt lengths up to
 * max_model_len, ~8% cancelled mid-stream, a decode pool small enough to preempt) at
 * concurrency 256, alternating rounds through the proxy to a NIXL prefill + decode pair
 * and, as the baseline of the same run, the same requests to one engine alone. Both sets of
 * servers live for the whole run, so their RSS and heap after each round (after a GC) are
 * the memory curve. Reports medians (min–max) of throughput and latency and the ratio.
 *   npm run bench -- soak [--rounds 5] [--requests 1000] [--concurrency 256]
 */
import { setLogLevel } from '../src/logging/logger.ts';
import {
  type BatchResult,
  MiB,
  runBatch,
  type SoakConfig,
  soakWorkload,
  startPlainServer,
  startSoakCluster,
} from '../test/faults/soak-harness.ts';

function arg(args: string[], name: string, fallback: number): number {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : fallback;
}

function percentile(xs: readonly number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const k = ((s.length - 1) * p) / 100;
  const lo = Math.floor(k);
  return s[lo]! + (s[Math.min(lo + 1, s.length - 1)]! - s[lo]!) * (k - lo);
}

const median = (xs: readonly number[]): number => percentile(xs, 50);
const span = (xs: readonly number[], digits = 1): string =>
  `${median(xs).toFixed(digits)} (${Math.min(...xs).toFixed(digits)}–${Math.max(...xs).toFixed(digits)})`;

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
    p50Ms: percentile(r.latenciesMs, 50),
    p99Ms: percentile(r.latenciesMs, 99),
    failed: r.failures.length,
    result: r,
  };
}

export async function main(args: string[]): Promise<void> {
  setLogLevel('warn');
  const rounds = arg(args, 'rounds', 5);
  const perRound = arg(args, 'requests', 1000);
  const cfg: SoakConfig = {
    requests: rounds * perRound,
    batches: rounds,
    concurrency: arg(args, 'concurrency', 256),
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
  const pd: Round[] = [];
  const alone: Round[] = [];
  const curve: string[] = [];
  try {
    for (let k = 0; k < rounds; k++) {
      const batch = items.slice(k * perRound, (k + 1) * perRound);
      // Alternate which goes first, so neither always runs on a warmer machine.
      const order = k % 2 === 0 ? (['pd', 'plain'] as const) : (['plain', 'pd'] as const);
      for (const which of order) {
        const r = round(await runBatch(which === 'pd' ? cluster : plain, batch, cfg, k * perRound));
        (which === 'pd' ? pd : alone).push(r);
      }
      const [p, d] = pd.at(-1)!.result.servers;
      const solo = alone.at(-1)!.result.servers[0]!;
      curve.push(
        `| ${(k + 1) * perRound} | ${(p!.rss / MiB).toFixed(1)} | ${(p!.heapUsed / MiB).toFixed(1)} | ${(d!.rss / MiB).toFixed(1)} | ${(d!.heapUsed / MiB).toFixed(1)} | ${d!.numPreemptions} | ${(solo.rss / MiB).toFixed(1)} | ${(solo.heapUsed / MiB).toFixed(1)} |`,
      );
      console.error(
        `round ${k + 1}/${rounds}: P/D ${pd.at(-1)!.reqPerS.toFixed(1)} req/s, alone ${alone.at(-1)!.reqPerS.toFixed(1)} req/s`,
      );
    }
  } finally {
    await cluster.close();
    await plain.close();
  }
  const ratio = median(pd.map((r) => r.reqPerS)) / median(alone.map((r) => r.reqPerS));
  const failures = [...pd, ...alone].reduce((n, r) => n + r.failed, 0);
  console.log(
    `\nSoak: ${rounds} rounds × ${perRound} requests at concurrency ${cfg.concurrency}, tiny, max_model_len ${cfg.maxModelLen}, ~8% cancelled`,
  );
  console.log('| target | req/s | p50 latency (ms) | p99 latency (ms) | failed |');
  console.log('|---|---|---|---|---|');
  for (const [name, rs] of [
    ['P/D through the proxy', pd],
    ['one engine alone', alone],
  ] as const) {
    console.log(
      `| ${name} | ${span(rs.map((r) => r.reqPerS))} | ${span(
        rs.map((r) => r.p50Ms),
        0,
      )} | ${span(
        rs.map((r) => r.p99Ms),
        0,
      )} | ${rs.reduce((n, r) => n + r.failed, 0)} |`,
    );
  }
  console.log(`ratio P/D ÷ alone (median req/s): ${ratio.toFixed(2)}`);
  console.log('\nMemory after each round, idle, after a GC (MiB):');
  console.log('| requests | P rss | P heap | D rss | D heap | D preemptions | alone rss | alone heap |');
  console.log('|---|---|---|---|---|---|---|---|');
  for (const line of curve) console.log(line);
  const first = pd[0]!.result.servers;
  const last = pd.at(-1)!.result.servers;
  console.log(
    JSON.stringify({
      bench: 'soak',
      rounds,
      requests_per_round: perRound,
      concurrency: cfg.concurrency,
      pd_req_per_s: median(pd.map((r) => r.reqPerS)),
      alone_req_per_s: median(alone.map((r) => r.reqPerS)),
      pd_over_alone: ratio,
      pd_p99_ms: median(pd.map((r) => r.p99Ms)),
      alone_p99_ms: median(alone.map((r) => r.p99Ms)),
      failed_requests: failures,
      prefill_rss_growth_mib: (last[0]!.rss - first[0]!.rss) / MiB,
      decode_rss_growth_mib: (last[1]!.rss - first[1]!.rss) / MiB,
      prefill_heap_growth_mib: (last[0]!.heapUsed - first[0]!.heapUsed) / MiB,
      decode_heap_growth_mib: (last[1]!.heapUsed - first[1]!.heapUsed) / MiB,
      decode_preemptions: last[1]!.numPreemptions,
    }),
  );
}
