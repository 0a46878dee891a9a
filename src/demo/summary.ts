/**
 * The demo's result: disaggregated vs plain latencies, KV moved, prefix-cache reuse and the
 * output comparison, as a table for people and one JSON object for scripts.
 */
import { nearestRankPercentile } from '../util/percentile.ts';
import type { CompletionResult } from './client.ts';
import type { MetricReading } from './metrics.ts';
import { type DemoSample, pickSamples } from './samples.ts';
import type { DemoRequest } from './workload.ts';

export interface PhaseResult {
  results: CompletionResult[];
  wallMs: number;
}

export interface Mismatch {
  index: number;
  disaggregated: string;
  plain: string;
}

export interface DemoSummary {
  connector: string;
  /** pull/push (NIXL) or READ/WRITE (MoRIIO). */
  transfer_mode: string;
  /** MoRIIO's backend (xgmi or rdma); null for NIXL. */
  moriio_backend: string | null;
  model: string;
  requests: number;
  concurrency: number;
  ttft_p50_ms: { disaggregated: number; plain: number };
  ttft_p99_ms: { disaggregated: number; plain: number };
  wall_time_s: { disaggregated: number; plain: number };
  /**
   * Summed over P and D (each records the transfers it posts: NIXL pull and MoRIIO READ on D,
   * NIXL push and MoRIIO WRITE on P); null when the connector exports no transfer metrics.
   */
  kv_bytes_moved: number | null;
  kv_blocks_moved: number | null;
  kv_transfers: number | null;
  kv_transfer_time_s: number | null;
  transfer_gb_per_s: number | null;
  failed_transfers: number | null;
  prompt_tokens_computed: { prefill: number; decode: number; plain: number };
  decode_tokens_loaded: number;
  prefix_cache_hit_rate: { prefill: number; plain: number };
  outputs_identical: boolean;
  identical_count: number;
  mismatches: Mismatch[];
  /** A few prompts with both completions, for people to read. */
  samples: DemoSample[];
}

/** The nearest-rank percentile (p in 0..100) of the finite values; NaN when there are none. */
export function nearestRankOf(values: readonly number[], p: number): number {
  return nearestRankPercentile(
    values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b),
    p,
  );
}

/** Identical = same text, same token ids and the same per-token log-probabilities. */
export function sameOutput(a: CompletionResult, b: CompletionResult): boolean {
  if (
    a.text !== b.text ||
    a.tokenIds.length !== b.tokenIds.length ||
    a.logprobs.length !== b.logprobs.length
  ) {
    return false;
  }
  if (a.tokenIds.some((t, i) => t !== b.tokenIds[i])) return false;
  return a.logprobs.every((l, i) => Math.abs(l - (b.logprobs[i] ?? Number.NaN)) <= 1e-4);
}

export interface SummaryInput {
  connector: string;
  transferMode: string;
  moriioBackend: string | null;
  /** false: the servers export no transfer metrics (vllm:nixl_* / vllm:moriio_*), so those figures are null. */
  transferMetrics: boolean;
  model: string;
  concurrency: number;
  bytesPerBlock: number;
  disaggregated: PhaseResult;
  plain: PhaseResult;
  prefill: MetricReading;
  decode: MetricReading;
  reference: MetricReading;
  /** The workload, to pick the samples from. */
  requests?: readonly DemoRequest[];
}

const round = (v: number, digits = 3): number => (Number.isFinite(v) ? Number(v.toFixed(digits)) : 0);
const ratio = (a: number, b: number): number => (b > 0 ? a / b : 0);

export function summarize(input: SummaryInput): DemoSummary {
  const { disaggregated, plain, prefill, decode, reference } = input;
  const byIndex = new Map(plain.results.map((r) => [r.index, r]));
  const mismatches: Mismatch[] = [];
  for (const d of disaggregated.results) {
    const p = byIndex.get(d.index);
    if (p === undefined || !sameOutput(d, p)) {
      mismatches.push({ index: d.index, disaggregated: d.text, plain: p?.text ?? '(missing)' });
    }
  }
  const bytes = prefill.kvBytes + decode.kvBytes;
  const seconds = prefill.transferSeconds + decode.transferSeconds;
  const ttft = (phase: PhaseResult, p: number): number =>
    round(
      nearestRankOf(
        phase.results.map((r) => r.ttftMs),
        p,
      ),
      2,
    );
  const count = disaggregated.results.length;
  const known = <T>(value: T): T | null => (input.transferMetrics ? value : null);
  return {
    connector: input.connector,
    transfer_mode: input.transferMode,
    moriio_backend: input.moriioBackend,
    model: input.model,
    requests: count,
    concurrency: input.concurrency,
    ttft_p50_ms: { disaggregated: ttft(disaggregated, 50), plain: ttft(plain, 50) },
    ttft_p99_ms: { disaggregated: ttft(disaggregated, 99), plain: ttft(plain, 99) },
    wall_time_s: { disaggregated: round(disaggregated.wallMs / 1000), plain: round(plain.wallMs / 1000) },
    kv_bytes_moved: known(bytes),
    kv_blocks_moved: known(input.bytesPerBlock > 0 ? Math.round(bytes / input.bytesPerBlock) : 0),
    kv_transfers: known(prefill.transfers + decode.transfers),
    kv_transfer_time_s: known(round(seconds, 6)),
    transfer_gb_per_s: known(round(ratio(bytes, seconds) / 1e9, 3)),
    failed_transfers: known(prefill.failedTransfers + decode.failedTransfers),
    prompt_tokens_computed: {
      prefill: prefill.promptTokens,
      decode: decode.promptTokens,
      plain: reference.promptTokens,
    },
    decode_tokens_loaded: decode.externalHits,
    prefix_cache_hit_rate: {
      prefill: round(ratio(prefill.prefixHits, prefill.prefixQueries)),
      plain: round(ratio(reference.prefixHits, reference.prefixQueries)),
    },
    outputs_identical: mismatches.length === 0 && count > 0 && plain.results.length === count,
    identical_count: count - mismatches.length,
    mismatches,
    samples: pickSamples(input.requests ?? [], disaggregated.results, plain.results),
  };
}

function formatBytes(n: number): string {
  if (n >= 1 << 20) return `${(n / (1 << 20)).toFixed(2)} MiB`;
  if (n >= 1 << 10) return `${(n / (1 << 10)).toFixed(1)} KiB`;
  return `${n} B`;
}

const NOT_EXPORTED = 'n/a (no transfer metrics)';

function kvMoved(s: DemoSummary): string {
  if (s.kv_bytes_moved === null) return NOT_EXPORTED;
  return `${formatBytes(s.kv_bytes_moved)} · ${s.kv_blocks_moved} blocks · ${s.kv_transfers} transfers`;
}

const pct = (v: number): string => `${(v * 100).toFixed(1)}%`;
const ms = (v: number): string => `${v.toFixed(1)} ms`;

/** The human-readable table (no trailing newline). */
export function renderTable(s: DemoSummary): string {
  const rows: Array<[string, string, string]> = [
    ['', 'disaggregated (P→D)', 'plain (one server)'],
    ['requests', String(s.requests), String(s.requests)],
    ['time to first token p50', ms(s.ttft_p50_ms.disaggregated), ms(s.ttft_p50_ms.plain)],
    ['time to first token p99', ms(s.ttft_p99_ms.disaggregated), ms(s.ttft_p99_ms.plain)],
    ['wall time', `${s.wall_time_s.disaggregated.toFixed(2)} s`, `${s.wall_time_s.plain.toFixed(2)} s`],
    [
      'prompt tokens computed',
      `P ${s.prompt_tokens_computed.prefill} · D ${s.prompt_tokens_computed.decode}`,
      String(s.prompt_tokens_computed.plain),
    ],
    [
      'prefix cache hit rate',
      `P ${pct(s.prefix_cache_hit_rate.prefill)}`,
      pct(s.prefix_cache_hit_rate.plain),
    ],
    ['KV moved P→D', kvMoved(s), '—'],
    ['KV loaded by D', `${s.decode_tokens_loaded} prompt tokens`, '—'],
    [
      'transfer throughput',
      s.transfer_gb_per_s === null ? NOT_EXPORTED : `${s.transfer_gb_per_s.toFixed(3)} GB/s`,
      '—',
    ],
    ['failed transfers', s.failed_transfers === null ? NOT_EXPORTED : String(s.failed_transfers), '—'],
    [
      'outputs identical',
      `${s.outputs_identical ? '✓' : '✗'} ${s.identical_count}/${s.requests}`,
      '(greedy, text + token ids)',
    ],
  ];
  const w0 = Math.max(...rows.map((r) => r[0].length));
  const w1 = Math.max(...rows.map((r) => r[1].length));
  const lines = rows.map(([a, b, c]) => `  ${a.padEnd(w0)}   ${b.padEnd(w1)}   ${c}`.trimEnd());
  const mode = s.moriio_backend ? `${s.transfer_mode}, ${s.moriio_backend}` : s.transfer_mode;
  const title = `kvconnect demo — ${s.connector} (${mode}), model ${s.model}, ${s.requests} requests (${s.concurrency} concurrent)`;
  const out = [title, '', ...lines];
  if (s.failed_transfers !== null && s.failed_transfers > 0) {
    out.push(
      `  note: ${s.failed_transfers} KV load(s) failed; D recomputed those prompts (kv_load_failure_policy=recompute), see docs/demo.md`,
    );
  }
  for (const m of s.mismatches.slice(0, 5)) {
    out.push(
      `  ✗ request ${m.index}: disaggregated ${JSON.stringify(m.disaggregated)} vs plain ${JSON.stringify(m.plain)}`,
    );
  }
  return out.join('\n');
}
