/** The run as a text table (like `vllm bench serve`) and as a JSON document. */
import type { BenchSummary, Distribution } from './metrics.ts';
import type { BenchServeOptions } from './options.ts';
import type { BenchRun } from './runner.ts';

const fmt = (v: number): string => v.toFixed(2);

export function formatTable(s: BenchSummary): string {
  const rows: [string, string][] = [
    ['Successful requests', String(s.completed)],
    ['Failed requests', String(s.failed)],
    ['Benchmark duration (s)', fmt(s.durationS)],
    ['Total input tokens', String(s.totalInputTokens)],
    ['Total generated tokens', String(s.totalOutputTokens)],
    ['Request throughput (req/s)', fmt(s.requestThroughput)],
    ['Output token throughput (tok/s)', fmt(s.outputThroughput)],
  ];
  const lines = ['============ Serving Benchmark Result ============'];
  for (const [k, v] of rows) lines.push(`${k.padEnd(38)}${v.padStart(11)}`);
  lines.push(
    '',
    `${'metric (ms)'.padEnd(16)}${['mean', 'p50', 'p90', 'p99'].map((h) => h.padStart(11)).join('')}`,
  );
  const dist = (name: string, d: Distribution) =>
    lines.push(`${name.padEnd(16)}${[d.mean, d.p50, d.p90, d.p99].map((v) => fmt(v).padStart(11)).join('')}`);
  dist('TTFT', s.ttftMs);
  dist('TPOT', s.tpotMs);
  dist('ITL', s.itlMs);
  dist('E2E', s.e2eMs);
  lines.push('==================================================');
  return lines.join('\n');
}

const snakeDist = (prefix: string, d: Distribution): Record<string, number> => ({
  [`mean_${prefix}_ms`]: d.mean,
  [`p50_${prefix}_ms`]: d.p50,
  [`p90_${prefix}_ms`]: d.p90,
  [`p99_${prefix}_ms`]: d.p99,
});

/** The result file: vLLM-style snake_case figures plus per-request detail. */
export function resultJson(run: BenchRun, o: BenchServeOptions): Record<string, unknown> {
  const s = run.summary;
  return {
    base_url: o.baseUrl,
    endpoint: o.endpoint,
    model: o.model,
    request_rate: Number.isFinite(o.requestRate) ? o.requestRate : 'inf',
    max_concurrency: o.maxConcurrency ?? null,
    trace: o.trace ?? null,
    completed: s.completed,
    failed: s.failed,
    duration_s: s.durationS,
    total_input_tokens: s.totalInputTokens,
    total_output_tokens: s.totalOutputTokens,
    request_throughput_req_s: s.requestThroughput,
    output_throughput_tok_s: s.outputThroughput,
    ...snakeDist('ttft', s.ttftMs),
    ...snakeDist('tpot', s.tpotMs),
    ...snakeDist('itl', s.itlMs),
    ...snakeDist('e2e', s.e2eMs),
    trace_problems: run.traceProblems,
    requests: run.results.map((r) => ({
      ok: r.ok,
      ...(r.error === undefined ? {} : { error: r.error }),
      start_ms: r.startMs,
      prompt_len: r.promptLen,
      output_tokens: r.outputTokens,
      ttft_ms: r.ttftMs,
      e2e_ms: r.e2eMs,
      itls_ms: r.itlMs,
    })),
  };
}
