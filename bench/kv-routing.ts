/**
 * KV-aware routing: multi-turn conversations of a Mooncake trace (see conversations())
 * replayed through `kvconnect proxy` in front of two kvconnect servers (separate processes,
 * KV events on), once per policy, the policies alternating over the rounds (their order
 * rotates, after one short uncounted warm-up run; fresh servers every run, so every run
 * starts cold). Reports the servers' prefix-cache hit rate (vllm:prefix_cache_hits_total /
 * queries), TTFT p50/p99, and how the work was split (the busier server's share of the
 * computed prompt tokens): medians over the rounds with min-max, and each policy's TTFT p50
 * against round_robin's of the same round.
 *   npm run bench -- kv-routing --trace FILE [--rounds 5] [--max-requests 60]
 *     [--block-words 4] [--time-scale 0.02] [--max-output-len 4]
 *     [--policies kv_aware,round_robin,prefix_aware]   (kv_aware@credit=X@running=Y sets its weights)
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadTrace, type TraceEntry } from '../src/bench-serve/index.ts';
import { setLogLevel } from '../src/logging/logger.ts';
import { benchArgs, decimal, exitWithUsageError, positiveInteger, text } from './_args.ts';
import { parsePolicySpec, type RunResult, runOnce } from './_kv-routing-run.ts';
import { fmt, json, loadAverage, summarize } from './_rounds.ts';
import { busiestShare } from './_server-load.ts';

/**
 * Whole multi-turn conversations of the trace: requests grouped by their first three hash
 * ids (a conversation's shared head), groups of two or more taken in order of first
 * appearance until `max` requests, replayed in timestamp order from time 0. A window of
 * consecutive requests reuses little (the turns of one conversation are minutes apart), so
 * it would say nothing about routing. Every request of the conversation trace starts with
 * the same block (hash id 0, a shared system prompt).
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

function writeSubset(path: string, entries: readonly TraceEntry[]): void {
  const line = (e: TraceEntry) =>
    JSON.stringify({
      timestamp: e.timestampMs,
      input_length: e.inputLength,
      output_length: e.outputLength,
      hash_ids: e.hashIds,
    });
  writeFileSync(path, entries.map(line).join('\n'));
}

function describe(r: RunResult): string {
  const servers = r.servers
    .map(
      (l) =>
        `${l.requests} req, ${l.computedTokens} tok computed, in system mean ${l.meanInSystem.toFixed(1)} peak ${l.peakInSystem}`,
    )
    .join(' | ');
  return `hit ${(100 * r.hitRate).toFixed(1)}%, TTFT p50 ${r.ttftP50.toFixed(0)} ms p99 ${r.ttftP99.toFixed(0)} ms, ${r.completed} ok ${r.failed} failed; ${servers}`;
}

export async function main(args: string[]): Promise<void> {
  const flags = benchArgs(
    'kv-routing',
    {
      trace: text('the Mooncake-format JSONL trace to replay', { value: 'path' }),
      rounds: positiveInteger(5, 'rounds, each running every policy'),
      'max-requests': positiveInteger(60, 'requests replayed, whole conversations'),
      'block-words': positiveInteger(4, 'words per trace hash block'),
      'time-scale': decimal(0.02, 'multiply trace timestamps: 0.1 = 10x faster', { positive: false }),
      'max-output-len': positiveInteger(4, 'cap the output lengths of the trace'),
      policies: text('comma-separated policies; kv_aware@credit=X@running=Y sets its weights', {
        default: 'kv_aware,round_robin,prefix_aware',
        value: 'list',
      }),
    },
    args,
  );
  setLogLevel('warn');
  const trace = flags.trace;
  const rounds = flags.rounds;
  const o = {
    maxRequests: flags['max-requests'],
    blockWords: flags['block-words'],
    timeScale: flags['time-scale'],
    maxOutputLen: flags['max-output-len'],
  };
  const specs = flags.policies.split(',').map((label) => {
    let spec: ReturnType<typeof parsePolicySpec>;
    try {
      spec = parsePolicySpec(label);
    } catch (err) {
      return exitWithUsageError('kv-routing', (err as Error).message);
    }
    if (Object.values(spec.weights).some((w) => !Number.isFinite(w))) {
      exitWithUsageError(
        'kv-routing',
        `--policies expects numbers in credit=X and running=Y, got '${label}'`,
      );
    }
    return spec;
  });
  const dir = mkdtempSync(join(tmpdir(), 'kvc-kv-routing-'));
  const subset = join(dir, 'trace.jsonl');
  const entries = conversations(loadTrace(trace).entries, o.maxRequests);
  writeSubset(subset, entries);
  const loads = [loadAverage()];
  const results = new Map<string, RunResult[]>(specs.map((s) => [s.label, []]));
  try {
    // The first run of a process pays for loading and compiling the proxy's code paths, and
    // it is always the first policy's: a short uncounted run takes that out of round 1.
    await runOnce(specs[0]!, subset, { ...o, maxRequests: Math.min(8, o.maxRequests) });
    for (let r = 0; r < rounds; r++) {
      for (let k = 0; k < specs.length; k++) {
        const spec = specs[(k + r) % specs.length]!;
        const res = await runOnce(spec, subset, o);
        results.get(spec.label)!.push(res);
        loads.push(loadAverage());
        console.error(`round ${r + 1} ${spec.label}: ${describe(res)}`);
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const base = results.get('round_robin');
  const summary = specs.map(({ label }) => {
    const rs = results.get(label)!;
    return {
      label,
      hit: summarize(rs.map((x) => 100 * x.hitRate)),
      p50: summarize(rs.map((x) => x.ttftP50)),
      p99: summarize(rs.map((x) => x.ttftP99)),
      busiest: summarize(rs.map((x) => 100 * busiestShare(x.servers))),
      // Each round's p50 over round_robin's p50 of the same round.
      vsRr: summarize(base ? rs.map((x, i) => x.ttftP50 / base[i]!.ttftP50) : []),
      failed: rs.reduce((n, x) => n + x.failed, 0),
    };
  });
  const load = summarize(loads);
  console.log(
    `kv-routing: ${entries.length} requests (whole conversations) of ${trace}, time scale ${o.timeScale}, ${rounds} rounds, load average ${load.min}-${load.max}`,
  );
  const row = (cells: string[]) => `| ${cells.join(' | ')} |`;
  console.log(
    row([
      'policy',
      'hit rate %',
      'TTFT p50 ms',
      'TTFT p99 ms',
      'p50 / round_robin',
      'busier server %',
      'failed',
    ]),
  );
  for (const s of summary) {
    console.log(
      row([
        s.label,
        fmt(s.hit, 1),
        fmt(s.p50),
        fmt(s.p99),
        s.vsRr.n > 0 ? fmt(s.vsRr, 2) : '-',
        fmt(s.busiest, 0),
        String(s.failed),
      ]),
    );
  }
  console.log(
    JSON.stringify({
      benchmark: 'kv_routing',
      trace,
      requests: entries.length,
      time_scale: o.timeScale,
      rounds,
      load_avg_1m: json(load, 2),
      policies: summary.map((s) => ({
        policy: s.label,
        prefix_cache_hit_rate_pct: json(s.hit, 1),
        ttft_p50_ms: json(s.p50, 0),
        ttft_p99_ms: json(s.p99, 0),
        ttft_p50_ratio_to_round_robin: s.vsRr.n > 0 ? json(s.vsRr, 3) : null,
        busier_server_computed_tokens_pct: json(s.busiest, 1),
        failed_requests: s.failed,
      })),
    }),
  );
}
