/**
 * KV-aware routing: multi-turn conversations of a Mooncake trace (see conversations())
 * replayed through `kvconnect proxy` in front of two
 * kvconnect servers (separate processes, KV events on), once per policy, the policies
 * alternating over the rounds (fresh servers every run, so every run starts cold).
 * Reports the servers' prefix-cache hit rate (vllm:prefix_cache_hits_total / queries) and
 * TTFT p50/p99 per policy: medians over the rounds with min-max, and each policy's ratio to
 * round_robin (the baseline, measured in the same run).
 *   npm run bench -- kv-routing --trace FILE [--rounds 5] [--max-requests 60]
 *     [--block-words 4] [--time-scale 0.02] [--max-output-len 4] [--policies kv_aware,round_robin,prefix_aware]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { loadTrace, resolveBenchOptions, runBenchServe, type TraceEntry } from '../src/bench-serve/index.ts';
import { setLogLevel } from '../src/logging/logger.ts';
import { resolveProxyOptions, startProxy } from '../src/proxy/index.ts';
import type { PolicyName } from '../src/proxy/types.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

function arg(args: string[], name: string, fallback: string): string {
  const i = args.indexOf(name);
  return i >= 0 && args[i + 1] !== undefined ? args[i + 1]! : fallback;
}

async function startServer(): Promise<{ url: string; proc: ChildProcess }> {
  const events = {
    enable_kv_cache_events: true,
    endpoint: 'tcp://127.0.0.1:*',
    replay_endpoint: 'tcp://127.0.0.1:*',
  };
  const proc = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      'src/cli/main.ts',
      'serve',
      '--model',
      'tiny',
      '--port',
      '0',
      '--max-model-len',
      '4096',
      '--kv-cache-memory-bytes',
      '256M',
      '--max-num-batched-tokens',
      '4096',
      '--kv-events-config',
      JSON.stringify(events),
    ],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, KVCONNECT_LOG_LEVEL: 'warn' } },
  );
  const url = await new Promise<string>((resolve, reject) => {
    proc.once('exit', (code) => reject(new Error(`server exited (${code})`)));
    createInterface({ input: proc.stdout! }).on('line', (line) => {
      const m = /listening on (http:\/\/\S+)/.exec(line);
      if (m) resolve(m[1]!);
    });
  });
  return { url, proc };
}

async function prefixCounters(url: string): Promise<{ queries: number; hits: number }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const value = (name: string) =>
    Number(
      text
        .split('\n')
        .find((l) => l.startsWith(`${name}{`))
        ?.split(' ')
        .at(-1) ?? 0,
    );
  return { queries: value('vllm:prefix_cache_queries_total'), hits: value('vllm:prefix_cache_hits_total') };
}

interface RunResult {
  hitRate: number;
  ttftP50: number;
  ttftP99: number;
  completed: number;
  failed: number;
}

async function runOnce(policy: PolicyName, tracePath: string, o: Record<string, number>): Promise<RunResult> {
  const servers = await Promise.all([startServer(), startServer()]);
  const proxy = await startProxy(
    resolveProxyOptions({
      prefill: [],
      decode: servers.map((s) => s.url),
      port: 0,
      policy,
      tokenizer: 'tiny',
      healthIntervalMs: 1000,
      // A busy engine answers /health late; the bench is about routing, not failure detection.
      healthTimeoutMs: 30_000,
    }),
  );
  try {
    if (policy === 'kv_aware') {
      // Wait until the proxy follows both servers' events.
      for (
        let i = 0;
        i < 200 &&
        servers.some(
          (s) => proxy.kvEvents?.sourceOf(proxy.pool.all().find((b) => b.url === s.url)!) === null,
        );
        i++
      )
        await new Promise((r) => setTimeout(r, 25));
    }
    const run = await runBenchServe(
      resolveBenchOptions({
        model: 'tiny',
        baseUrl: proxy.url,
        trace: tracePath,
        traceBlockTokens: o['blockWords']!,
        traceTimeScale: o['timeScale']!,
        timeoutMs: 600_000,
        maxRequests: o['maxRequests']!,
        traceMaxOutputLen: o['maxOutputLen']!,
        ignoreEos: true,
        seed: 0,
      }),
    );
    const counters = await Promise.all(servers.map((s) => prefixCounters(s.url)));
    const queries = counters.reduce((n, c) => n + c.queries, 0);
    const hits = counters.reduce((n, c) => n + c.hits, 0);
    return {
      hitRate: queries > 0 ? hits / queries : 0,
      ttftP50: run.summary.ttftMs.p50,
      ttftP99: run.summary.ttftMs.p99,
      completed: run.summary.completed,
      failed: run.summary.failed,
    };
  } finally {
    await proxy.close();
    for (const s of servers) s.proc.kill('SIGTERM');
    await Promise.all(
      servers.map((s) => new Promise((r) => (s.proc.exitCode === null ? s.proc.once('exit', r) : r(null)))),
    );
  }
}

/**
 * Whole multi-turn conversations of the trace: requests grouped by their first three hash
 * ids (a conversation's shared head), groups of two or more taken in order of first
 * appearance until `max` requests, replayed in timestamp order from time 0. A window of
 * consecutive requests reuses little (the turns of one conversation are minutes apart), so
 * it would say nothing about routing.
 */
function conversations(all: readonly TraceEntry[], max: number): TraceEntry[] {
  const groups = new Map<string, TraceEntry[]>();
  for (const e of all) {
    if (e.hashIds.length < 3) continue;
    const key = e.hashIds.slice(0, 3).join(',');
    groups.set(key, [...(groups.get(key) ?? []), e]);
  }
  const picked: TraceEntry[] = [];
  for (const g of groups.values()) {
    if (g.length < 2) continue;
    picked.push(...g);
    if (picked.length >= max) break;
  }
  picked.sort((a, b) => a.timestampMs - b.timestampMs);
  const t0 = picked[0]?.timestampMs ?? 0;
  return picked.slice(0, max).map((e) => ({ ...e, timestampMs: e.timestampMs - t0 }));
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;

export async function main(args: string[]): Promise<void> {
  setLogLevel('warn');
  const trace = arg(args, '--trace', '');
  if (!trace) throw new Error('pass --trace FILE (a Mooncake-format JSONL trace)');
  const rounds = Number(arg(args, '--rounds', '5'));
  const o = {
    maxRequests: Number(arg(args, '--max-requests', '60')),
    blockWords: Number(arg(args, '--block-words', '4')),
    timeScale: Number(arg(args, '--time-scale', '0.02')),
    maxOutputLen: Number(arg(args, '--max-output-len', '4')),
  };
  const policies = arg(args, '--policies', 'kv_aware,round_robin,prefix_aware').split(',') as PolicyName[];
  const dir = mkdtempSync(join(tmpdir(), 'kvc-kv-routing-'));
  const subset = join(dir, 'trace.jsonl');
  const entries = conversations(loadTrace(trace).entries, o.maxRequests);
  writeFileSync(
    subset,
    entries
      .map((e) =>
        JSON.stringify({
          timestamp: e.timestampMs,
          input_length: e.inputLength,
          output_length: e.outputLength,
          hash_ids: e.hashIds,
        }),
      )
      .join('\n'),
  );
  const load = loadavg()[0]!;
  const results = new Map<PolicyName, RunResult[]>(policies.map((p) => [p, []]));
  try {
    for (let r = 0; r < rounds; r++) {
      const order = policies.map((_, i) => policies[(i + r) % policies.length]!);
      for (const policy of order) {
        const res = await runOnce(policy, subset, o);
        results.get(policy)!.push(res);
        console.error(
          `round ${r + 1} ${policy}: hit ${(100 * res.hitRate).toFixed(1)}%, TTFT p50 ${res.ttftP50.toFixed(0)} ms p99 ${res.ttftP99.toFixed(0)} ms, ${res.completed} ok ${res.failed} failed`,
        );
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const summary = policies.map((p) => {
    const rs = results.get(p)!;
    const pick = (f: (x: RunResult) => number) => ({
      median: median(rs.map(f)),
      min: Math.min(...rs.map(f)),
      max: Math.max(...rs.map(f)),
    });
    return {
      policy: p,
      hit: pick((x) => x.hitRate),
      p50: pick((x) => x.ttftP50),
      p99: pick((x) => x.ttftP99),
      failed: rs.reduce((n, x) => n + x.failed, 0),
    };
  });
  const base = summary.find((s) => s.policy === 'round_robin') ?? summary[0]!;
  console.log(
    `kv-routing: ${entries.length} requests (whole conversations) of ${trace}, ${rounds} rounds, load ${load.toFixed(2)} at start`,
  );
  console.log(
    'policy         hit rate (min-max)        TTFT p50 ms (min-max)   TTFT p99 ms (min-max)   p50 vs rr',
  );
  for (const s of summary) {
    console.log(
      `${s.policy.padEnd(14)} ${(100 * s.hit.median).toFixed(1).padStart(5)}% (${(100 * s.hit.min).toFixed(1)}-${(100 * s.hit.max).toFixed(1)})`.padEnd(
        42,
      ) +
        `${s.p50.median.toFixed(0).padStart(6)} (${s.p50.min.toFixed(0)}-${s.p50.max.toFixed(0)})`.padEnd(
          24,
        ) +
        `${s.p99.median.toFixed(0).padStart(6)} (${s.p99.min.toFixed(0)}-${s.p99.max.toFixed(0)})`.padEnd(
          24,
        ) +
        `${(s.p50.median / base.p50.median).toFixed(2)}`,
    );
  }
  console.log(
    JSON.stringify({
      benchmark: 'kv_routing',
      trace,
      requests: entries.length,
      rounds,
      load_avg_1m: load,
      policies: summary.map((s) => ({
        policy: s.policy,
        prefix_cache_hit_rate: s.hit.median,
        prefix_cache_hit_rate_min: s.hit.min,
        prefix_cache_hit_rate_max: s.hit.max,
        ttft_p50_ms: s.p50.median,
        ttft_p50_ms_min: s.p50.min,
        ttft_p50_ms_max: s.p50.max,
        ttft_p99_ms: s.p99.median,
        ttft_p99_ms_min: s.p99.min,
        ttft_p99_ms_max: s.p99.max,
        ttft_p50_ratio_to_round_robin: s.p50.median / base.p50.median,
        failed_requests: s.failed,
      })),
    }),
  );
}
