/**
 * Emulated deployments (docs/emulation.md): how closely a `kvconnect serve --mode random`
 * server keeps the time its step-time model says. The baseline of each row is the
 * configured model itself, evaluated as a function on the same batches the server ran:
 *
 * - batch 1 (one request at a time): the bench replays the server's step-time model with the
 *   server's seed, request by request, so it knows the very durations the server drew
 *   (llm-d-inference-sim's jitter, truncated to whole milliseconds as the sim does). Each
 *   request's TTFT and mean ITL is divided by its own modelled value; the figure is the
 *   median of those ratios. TTFT is the server's own (`vllm:time_to_first_token_seconds`,
 *   arrival to first token, as vLLM and the calibration from a real vLLM's /metrics read it);
 *   the client's TTFT, which adds the HTTP request and SSE delivery, is shown beside it. ITL is
 *   the client's (the HTTP path cancels between tokens). A p50 of the jittered draws
 *   themselves would sit on a whole-millisecond step (half the draws of a 12 ms ITL are 11 ms
 *   or less), so comparing medians of draws and of measurements is not a fair test;
 *   per-request ratios are;
 * - the three published llm-d-inference-sim profiles, each with its constant and per-token
 *   file: batch-1 TTFT (256-token prompt) and ITL;
 * - the roofline built-ins: batch-1 TTFT and ITL, also against the reference ranges;
 * - ITL against batch size at a fixed context (roofline, llama-3.1-8b on h100): the client's
 *   per-request median gap against the model at that batch;
 * - P/D: a decode server's TTFT with an emulated link (--kv-link) against the same pair
 *   without it, alternating, for Llama-3.1-8B-size KV (/16), with the link's counters; the
 *   model of the TTFT with the link is the plain pair's TTFT with its real transfer time
 *   (vllm:nixl_xfer_time_seconds) replaced by the link's, when that is longer;
 * - replicas per box: N in-process ranks (--data-parallel-size) behind one port, one
 *   closed-loop stream each (pinned by X-data-parallel-rank), ITL against the model (±5%),
 *   the request rate reached and memory per replica; N = 1, 8, 24, 48, 96 until a count
 *   leaves ±5%.
 *
 * Every ratio: median over rounds with min–max; the goal is within ±5%.
 *
 *   npm run bench -- emulate [--rounds 5] [--requests 4] [--tokens 24]
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { type RequestResult, sendStreaming } from '../src/bench-serve/sse-client.ts';
import { buildEmulationConfig } from '../src/config/emulation-config.ts';
import { loadSimConfigFile } from '../src/config/sim-config-file.ts';
import { sumMetric } from '../src/demo/metrics.ts';
import { type ServeProcess, startServe } from '../src/demo/processes.ts';
import { createStepTimeModel } from '../src/engine/timing/emulation.ts';
import {
  type ScheduledSeq,
  type StepBatch,
  type StepTimeModel,
  scheduledSeq,
} from '../src/engine/timing/step-batch.ts';
import { setLogLevel } from '../src/logging/logger.ts';
import { mulberry32 } from '../src/util/mulberry32.ts';
import { nearestRankPercentile } from '../src/util/percentile.ts';
import { benchArgs, positiveInteger } from './_args.ts';
import { nixlTcpTransferConfig } from './_nixl.ts';
import { fmt, json, loadAverage, summarize } from './_rounds.ts';

const PROFILE_DIR = new URL('../test/fixtures/sim-latency-profiles/', import.meta.url).pathname;
const PROFILES = ['8b-h100-balanced', '70b-h100-tp8-throughput', 'small-l40s-edge'];
const PROMPT = 256;

interface Row {
  name: string;
  metric: 'TTFT' | 'ITL';
  /** Per round: the model's p50 over the round's requests (the durations the server applied). */
  model: number[];
  /** Per round: the measured p50. */
  measured: number[];
  /** Per round: the median of measured / modelled, request by request (batch rows: p50 / model). */
  ratio: number[];
  /** TTFT rows, per round: the client's p50 (server TTFT + HTTP request + SSE delivery). */
  client?: number[];
  reference?: [number, number];
}

/** The seed of every batch-1 server, so the bench can replay its jitter. */
const SEED = 1234;

/**
 * A prompt of `len` ids in [10, 210) that no other seed shares a block with, so the prefix
 * cache never shortens a measured prefill (the sim's models do not charge cached tokens).
 */
function prompt(seed: number, len: number): number[] {
  const next = mulberry32(seed + 1);
  return Array.from({ length: len }, () => 10 + Math.floor(next() * 200));
}

const seq = scheduledSeq;

/** The model's duration of one batch shape (a deterministic model: roofline, no jitter). */
function modelMs(options: Record<string, unknown>, batch: StepBatch): number {
  const model = createStepTimeModel(buildEmulationConfig(options, SEED));
  if (!model) throw new Error('no step-time model');
  return model.stepMs(batch);
}

/**
 * The durations a server with step-time model `options` and `seed` applies to batch-1
 * requests of `promptLen` tokens and `tokens` outputs: the same model, with the same seed,
 * called in the server's order (one prefill step, then one decode step per further token,
 * request after request) draws what the server drew, jitter included.
 */
export class Batch1Replay {
  readonly #model: StepTimeModel;
  readonly #promptLen: number;
  readonly #tokens: number;

  constructor(options: Record<string, unknown>, seed: number, promptLen: number, tokens: number) {
    const model = createStepTimeModel(buildEmulationConfig(options, seed));
    if (!model) throw new Error('no step-time model');
    this.#model = model;
    this.#promptLen = promptLen;
    this.#tokens = tokens;
  }

  /** The next request's modelled TTFT and mean ITL, ms. */
  next(): { ttft: number; itl: number } {
    const at = (s: ScheduledSeq): number => this.#model.stepMs({ seqs: [s], maxNumSeqs: 64 });
    const ttft = at(seq({ numNewTokens: this.#promptLen, firstChunk: true, firstToken: true }));
    let itl = 0;
    for (let j = 0; j < this.#tokens - 1; j++)
      itl += at(seq({ contextBefore: this.#promptLen + j, decode: true }));
    return { ttft, itl: itl / (this.#tokens - 1) };
  }
}

/** The server's TTFT sum (s) and count, from its /metrics. */
async function serverTtft(baseUrl: string): Promise<{ sum: number; count: number }> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  return {
    sum: sumMetric(text, 'vllm:time_to_first_token_seconds_sum'),
    count: sumMetric(text, 'vllm:time_to_first_token_seconds_count'),
  };
}

/** One streaming completion of `promptIds` with ignore_eos; throws when it fails. */
async function stream(
  baseUrl: string,
  dispatcher: Agent,
  promptIds: number[],
  maxTokens: number,
  extra: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): Promise<RequestResult> {
  const r = await sendStreaming({
    url: `${baseUrl}/v1/completions`,
    body: {
      model: 'emulated',
      prompt: promptIds,
      max_tokens: maxTokens,
      ignore_eos: true,
      stream: true,
      ...extra,
    },
    chat: false,
    headers,
    dispatcher,
    timeoutMs: 120_000,
    promptLen: promptIds.length,
    runStart: performance.now(),
  });
  if (!r.ok) throw new Error(`request to ${baseUrl} failed: ${r.error}`);
  return r;
}

/** `concurrency` streaming requests at once; per request the median of its gaps between tokens. */
async function measureBatch(
  server: ServeProcess,
  tokens: number,
  concurrency: number,
  promptLen: number,
  round: number,
): Promise<number[]> {
  const dispatcher = new Agent({ connections: concurrency });
  try {
    const results = await Promise.all(
      Array.from({ length: concurrency }, (_, c) =>
        stream(server.url, dispatcher, prompt(round * 1000 + c, promptLen), tokens),
      ),
    );
    return results.map((r) => p50(r.itlMs));
  } finally {
    await dispatcher.close();
  }
}

async function withServer<T>(args: string[], fn: (s: ServeProcess) => Promise<T>): Promise<T> {
  const server = await startServe(
    'emulated',
    ['--port', '0', '--mode', 'random', '--served-model-name', 'emulated', ...args],
    {
      timeoutMs: 60_000,
    },
  );
  try {
    return await fn(server);
  } finally {
    await server.stop();
  }
}

/** The row's verdicts: the ratio (median over rounds) within ±5%; the measured p50 inside the reference range. */
function verdicts(row: Row): { within5pct: boolean; inReference: boolean | null } {
  const median = summarize(row.measured).median;
  return {
    within5pct: Math.abs(summarize(row.ratio).median - 1) <= 0.05,
    inReference: row.reference ? median >= row.reference[0] && median <= row.reference[1] : null,
  };
}

function verdictText(v: { within5pct: boolean; inReference: boolean | null }): string {
  const parts = [v.within5pct ? '±5% ok' : '±5% MISS'];
  if (v.inReference !== null) parts.push(v.inReference ? 'in range' : 'OUT OF RANGE');
  return parts.join(', ');
}

/** The constant calculator's ITL of the replicas: within ±5% of it keeps a replica's timing. */
const REPLICA_ITL_MS = 12;

function p50(values: number[]): number {
  return nearestRankPercentile(
    [...values].sort((a, b) => a - b),
    50,
  );
}

export async function main(args: string[]): Promise<void> {
  setLogLevel('warn');
  const { rounds, requests, tokens } = benchArgs(
    'emulate',
    {
      rounds: positiveInteger(5, 'rounds per configuration'),
      requests: positiveInteger(4, 'batch-1 requests per round'),
      tokens: positiveInteger(24, 'output tokens per request'),
    },
    args,
  );
  const rows: Row[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'kvconnect-bench-emulate-'));

  // Batch-1 TTFT (a 256-token prompt) and ITL of one server, against the model's p50.
  const batch1 = async (
    name: string,
    options: Record<string, unknown>,
    serverArgs: string[],
    refs?: { ttft: [number, number]; itl: [number, number] },
  ): Promise<void> => {
    const ttftRow: Row = {
      name,
      metric: 'TTFT',
      model: [],
      measured: [],
      ratio: [],
      client: [],
      ...(refs ? { reference: refs.ttft } : {}),
    };
    const itlRow: Row = {
      name,
      metric: 'ITL',
      model: [],
      measured: [],
      ratio: [],
      ...(refs ? { reference: refs.itl } : {}),
    };
    const replay = new Batch1Replay(options, SEED, PROMPT, tokens);
    await withServer([...serverArgs, '--max-model-len', '1024', '--seed', String(SEED)], async (server) => {
      const dispatcher = new Agent({ connections: 1 });
      try {
        for (let r = 0; r < rounds; r++) {
          const m = { ttft: [] as number[], itl: [] as number[], client: [] as number[] };
          const model = { ttft: [] as number[], itl: [] as number[] };
          const ratio = { ttft: [] as number[], itl: [] as number[] };
          for (let i = 0; i < requests; i++) {
            const before = await serverTtft(server.url);
            const res = await stream(server.url, dispatcher, prompt(r * 1000 + i * 64, PROMPT), tokens);
            const after = await serverTtft(server.url);
            const want = replay.next();
            if (after.count !== before.count + 1 || res.itlMs.length !== tokens - 1)
              throw new Error(`request ${r}/${i}: expected one TTFT and ${tokens - 1} gaps`);
            const ttft = (after.sum - before.sum) * 1e3;
            const itl = res.itlMs.reduce((a, b) => a + b, 0) / res.itlMs.length;
            m.ttft.push(ttft);
            m.client.push(res.ttftMs);
            m.itl.push(itl);
            model.ttft.push(want.ttft);
            model.itl.push(want.itl);
            ratio.ttft.push(ttft / want.ttft);
            ratio.itl.push(itl / want.itl);
          }
          ttftRow.measured.push(p50(m.ttft));
          ttftRow.client?.push(p50(m.client));
          ttftRow.model.push(p50(model.ttft));
          ttftRow.ratio.push(p50(ratio.ttft));
          itlRow.measured.push(p50(m.itl));
          itlRow.model.push(p50(model.itl));
          itlRow.ratio.push(p50(ratio.itl));
        }
      } finally {
        await dispatcher.close();
      }
    });
    rows.push(ttftRow, itlRow);
  };

  // 1. The sim's profiles, loaded unchanged (port and model overridden by flags); a copy so
  // the bench reads the file as a user passes it (--config), max-num-seqs included.
  for (const profile of PROFILES) {
    for (const calc of ['constant', 'per-token']) {
      const file = join(PROFILE_DIR, `${profile}-${calc}.yaml`);
      const copy = join(dir, `${profile}-${calc}.yaml`);
      writeFileSync(copy, readFileSync(file));
      await batch1(`${profile} (${calc})`, loadSimConfigFile(file).emulation, ['--config', copy]);
    }
  }

  // 2. Roofline built-ins at batch 1 (KV at 1/16 of the target's size to fit the default cache).
  const targets: Array<[string, number, [number, number], [number, number]]> = [
    ['llama-3.1-8b', 1, [60, 120], [10, 15]],
    ['mistral-7b', 1, [60, 120], [10, 15]],
    ['qwen3-32b', 2, [160, 280], [20, 30]],
    ['llama-3.1-70b', 8, [150, 250], [18, 28]],
  ];
  for (const [model, tp, ttft, itl] of targets) {
    const options = { 'latency-calculator': 'roofline', 'target-model': model, 'target-tp': String(tp) };
    const flags = Object.entries(options).flatMap(([k, v]) => [`--${k}`, v]);
    await batch1(`roofline ${model} ${tp}×h100`, options, [...flags, '--kv-bytes-scale', '16'], {
      ttft,
      itl,
    });
  }

  // 3. ITL against batch size at a fixed context (prompt 512).
  const batchRows: Row[] = [];
  const options8b = { 'latency-calculator': 'roofline', 'target-model': 'llama-3.1-8b' };
  await withServer(
    [
      '--latency-calculator',
      'roofline',
      '--target-model',
      'llama-3.1-8b',
      '--kv-bytes-scale',
      '16',
      '--max-model-len',
      '1024',
      '--max-num-seqs',
      '64',
      '--kv-cache-memory-bytes',
      '256M',
    ],
    async (server) => {
      for (const batch of [1, 8, 32]) {
        const model = modelMs(options8b, {
          seqs: Array.from({ length: batch }, () => seq({ contextBefore: 512 + tokens / 2, decode: true })),
          maxNumSeqs: 64,
        });
        const row: Row = {
          name: `roofline llama-3.1-8b, batch ${batch}, context 512`,
          metric: 'ITL',
          model: [],
          measured: [],
          ratio: [],
        };
        for (let r = 0; r < rounds; r++) {
          const itl = p50(await measureBatch(server, tokens, batch, 512, r + batch * 100));
          row.model.push(model);
          row.measured.push(itl);
          row.ratio.push(itl / model);
        }
        batchRows.push(row);
      }
    },
  );
  rows.push(...batchRows);

  const pd = await pdLink(rounds);
  const replicas = await replicasPerBox(rounds, tokens);

  const header = [
    'configuration',
    'metric',
    'model p50 ms',
    'measured p50 ms (min–max)',
    'ratio (min–max)',
    'client TTFT p50 ms',
    'reference',
    'verdict',
  ];
  const lines = rows.map((row) => [
    row.name,
    row.metric,
    summarize(row.model).median.toFixed(1),
    fmt(summarize(row.measured), 1),
    fmt(summarize(row.ratio), 3),
    row.client ? summarize(row.client).median.toFixed(1) : '',
    row.reference ? `${row.reference[0]}–${row.reference[1]}` : '',
    verdictText(verdicts(row)),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => (l[i] ?? '').length)));
  const print = (cells: string[]): void =>
    console.log(cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  '));
  print(header);
  for (const l of lines) print(l);
  const within = rows.filter((row) => verdicts(row).within5pct).length;
  const referenced = rows.filter((row) => row.reference);
  const inReference = referenced.filter((row) => verdicts(row).inReference).length;
  console.log(
    `\n${within} of ${rows.length} rows within ±5% of the model (median ratio); ` +
      `${inReference} of ${referenced.length} built-in rows inside the reference range; load average ${loadAverage()}`,
  );
  const linkExtra = pd.withLink.map((v, i) => v - (pd.without[i] ?? 0));
  // With the link, D's TTFT is the plain pair's with the real transfer replaced by the link's
  // modelled time when that is longer (the transfer runs for real inside it).
  const linkTtftModel = (without: number): number =>
    without - pd.plainXferMs + Math.max(pd.plainXferMs, pd.linkMs);
  const linkRatio = summarize(pd.withLink.map((v, i) => v / linkTtftModel(pd.without[i] ?? 0)));
  console.log(
    `\nP/D, ${pd.bytes} bytes of KV per request over --kv-link ${pd.link} (modelled ${pd.linkMs.toFixed(1)} ms): ` +
      `decode TTFT with the link ${fmt(summarize(pd.withLink), 1)} ms, without ${fmt(summarize(pd.without), 1)} ms, ` +
      `difference ${fmt(summarize(linkExtra), 1)} ms (${(summarize(linkExtra).median / pd.linkMs).toFixed(3)} of the link model); ` +
      `D's link counters: ${pd.counters.transfers} transfers, ${pd.counters.modelledMs.toFixed(1)} ms modelled and ` +
      `${pd.counters.heldMs.toFixed(1)} ms held per transfer (the rest is the real transfer's own time); ` +
      `TTFT with the link / (TTFT without − the plain pair's ${pd.plainXferMs.toFixed(1)} ms transfer + the longer of it and the link model): ${fmt(linkRatio, 3)}`,
  );
  const sustained = Math.max(0, ...replicas.filter(replicaWithin).map((r) => r.n));
  console.log(
    `\nreplicas (one process, --data-parallel-size N, one closed-loop stream per rank, constant 100 ms / ${REPLICA_ITL_MS} ms, no jitter):`,
  );
  for (const r of replicas) {
    console.log(
      `  ${String(r.n).padStart(3)} replicas: ITL p50 ${fmt(summarize(r.itl), 1)} ms (model ${REPLICA_ITL_MS}, ${replicaWithin(r) ? 'within' : 'outside'} ±5%), ${r.requestsPerSecond.toFixed(1)} requests/s, RSS ${r.rssMiB.toFixed(0)} MiB, ${(r.rssMiB / r.n).toFixed(1)} MiB per replica`,
    );
  }
  const capped = sustained === REPLICA_COUNTS.at(-1) ? ' (the largest count tried)' : '';
  console.log(`  most replicas measured with ITL within ±5%: ${sustained}${capped}`);
  console.log(
    JSON.stringify({
      bench: 'emulate',
      rounds,
      requests,
      tokens,
      within5pct: within,
      rows_total: rows.length,
      in_reference: inReference,
      reference_rows: referenced.length,
      load_average: loadAverage(),
      pd: {
        link: pd.link,
        bytes: pd.bytes,
        link_ms: Number(pd.linkMs.toFixed(2)),
        ttft_with_link_ms: json(summarize(pd.withLink), 2),
        ttft_without_ms: json(summarize(pd.without), 2),
        difference_ms: json(summarize(linkExtra), 2),
        difference_vs_link_model: Number((summarize(linkExtra).median / pd.linkMs).toFixed(3)),
        link_transfers: pd.counters.transfers,
        link_modelled_ms_per_transfer: Number(pd.counters.modelledMs.toFixed(2)),
        link_held_ms_per_transfer: Number(pd.counters.heldMs.toFixed(2)),
        plain_transfer_ms: Number(pd.plainXferMs.toFixed(2)),
        ttft_with_link_vs_model: json(linkRatio, 3),
      },
      replicas_itl_model_ms: REPLICA_ITL_MS,
      replicas_sustained_within_5pct: sustained,
      replicas: replicas.map((r) => ({
        n: r.n,
        itl_p50_ms: json(summarize(r.itl), 2),
        within_5pct: replicaWithin(r),
        requests_per_second: Number(r.requestsPerSecond.toFixed(1)),
        rss_mib: Math.round(r.rssMiB),
        rss_mib_per_replica: Number((r.rssMiB / r.n).toFixed(1)),
      })),
      rows: rows.map((row) => {
        const v = verdicts(row);
        return {
          name: row.name,
          metric: row.metric,
          model_p50_ms: json(summarize(row.model), 2),
          measured_p50_ms: json(summarize(row.measured), 2),
          ratio: json(summarize(row.ratio), 3),
          ...(row.client ? { client_ttft_p50_ms: json(summarize(row.client), 2) } : {}),
          within_5pct: v.within5pct,
          ...(row.reference ? { reference_ms: row.reference, in_reference: v.inReference } : {}),
        };
      }),
    }),
  );
}

const TARGET_KV = ['--mode', 'random', '--target-model', 'llama-3.1-8b', '--kv-bytes-scale', '16'];
// Slower than this machine's real transfer of the request's KV, so the link's hold shows.
const LINK = '0.05,60ms';

/** D's TTFT for prompts P prefilled, with and without an emulated link, alternating. */
async function pdLink(rounds: number): Promise<{
  link: string;
  bytes: number;
  linkMs: number;
  withLink: number[];
  without: number[];
  counters: { transfers: number; modelledMs: number; heldMs: number };
  /** The plain decode server's mean NIXL transfer time (vllm:nixl_xfer_time_seconds), ms. */
  plainXferMs: number;
}> {
  const common = [...TARGET_KV, '--max-model-len', '1024', '--kv-cache-memory-bytes', '128M'];
  const servers: ServeProcess[] = [];
  const start = async (args: string[]): Promise<ServeProcess> => {
    const s = await startServe('pd', ['--port', '0', '--served-model-name', 'emulated', ...common, ...args], {
      timeoutMs: 60_000,
    });
    servers.push(s);
    return s;
  };
  try {
    const p = await start(['--kv-transfer-config', nixlTcpTransferConfig('kv_producer', 'bench-p')]);
    const dLink = await start([
      '--kv-transfer-config',
      nixlTcpTransferConfig('kv_consumer', 'bench-d-link'),
      '--kv-link',
      LINK,
    ]);
    const dPlain = await start(['--kv-transfer-config', nixlTcpTransferConfig('kv_consumer', 'bench-d')]);
    const dispatcher = new Agent({ connections: 2 });
    let n = 0;
    const once = async (d: ServeProcess): Promise<number> => {
      const promptIds = prompt(90_000 + n++, PROMPT);
      const res = await fetch(`${p.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'emulated',
          prompt: promptIds,
          max_tokens: 1,
          kv_transfer_params: { do_remote_decode: true },
        }),
      });
      const params = ((await res.json()) as { kv_transfer_params: unknown }).kv_transfer_params;
      const r = await stream(d.url, dispatcher, promptIds, 2, { kv_transfer_params: params });
      return r.ttftMs;
    };
    // Warm both pairs (handshakes) before measuring.
    await once(dLink);
    await once(dPlain);
    const withLink: number[] = [];
    const without: number[] = [];
    for (let i = 0; i < rounds * 3; i++) {
      if (i % 2 === 0) {
        withLink.push(await once(dLink));
        without.push(await once(dPlain));
      } else {
        without.push(await once(dPlain));
        withLink.push(await once(dLink));
      }
    }
    await dispatcher.close();
    // The link's own counters on D (warm-up included), per transfer.
    const text = await (await fetch(`${dLink.url}/metrics`)).text();
    const transfers = sumMetric(text, 'kvconnect:kv_link_transfers_total');
    const perTransfer = (name: string): number =>
      (sumMetric(text, `kvconnect:kv_link_${name}_seconds_total`) * 1e3) / Math.max(1, transfers);
    const counters = { transfers, modelledMs: perTransfer('modelled'), heldMs: perTransfer('held') };
    const plain = await (await fetch(`${dPlain.url}/metrics`)).text();
    const plainXferMs =
      (sumMetric(plain, 'vllm:nixl_xfer_time_seconds_sum') * 1e3) /
      Math.max(1, sumMetric(plain, 'vllm:nixl_xfer_time_seconds_count'));
    // The prompt's full blocks travel: (256 - 1) / 16 = 15 blocks of 16 tokens × 8 KiB.
    const bytes = Math.floor((PROMPT - 1) / 16) * 16 * ((128 * 1024) / 16);
    const [bw, latency] = LINK.split(',');
    const linkMs = Number.parseFloat(latency ?? '0') + bytes / (Number(bw) * 1e6);
    return { link: LINK, bytes, linkMs, withLink, without, counters, plainXferMs };
  } finally {
    for (const s of servers) await s.stop();
  }
}

function rssMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? Number.NaN) / 1024;
}

/** Replica counts tried, up to the first whose ITL leaves ±5% of the model. */
const REPLICA_COUNTS = [1, 8, 24, 48, 96];

const replicaWithin = (r: { itl: number[] }): boolean =>
  Math.abs(summarize(r.itl).median / REPLICA_ITL_MS - 1) <= 0.05;

interface ReplicaRun {
  n: number;
  itl: number[];
  rssMiB: number;
  /** Requests completed per second of wall time over the rounds (the closed loop's rate). */
  requestsPerSecond: number;
}

/**
 * N in-process replicas, one stream each: ITL p50 per round, the request rate the closed
 * loops reached, and the process's memory; N grows until a count keeps no longer its timing.
 */
async function replicasPerBox(rounds: number, tokens: number): Promise<ReplicaRun[]> {
  const out: ReplicaRun[] = [];
  for (const n of REPLICA_COUNTS) {
    const timing = [
      '--latency-calculator',
      'constant',
      '--time-to-first-token',
      '100ms',
      '--inter-token-latency',
      '12ms',
    ];
    const server = await startServe(
      'replicas',
      [
        '--port',
        '0',
        '--mode',
        'random',
        '--served-model-name',
        'emulated',
        '--data-parallel-size',
        String(n),
        ...timing,
      ],
      { timeoutMs: 120_000 },
    );
    try {
      // Every stream goes to rank 0's port; X-data-parallel-rank runs stream i on rank i.
      const itl: number[] = [];
      const dispatcher = new Agent({ connections: n });
      const started = performance.now();
      for (let r = 0; r < rounds; r++) {
        const results = await Promise.all(
          Array.from({ length: n }, (_, i) =>
            stream(
              server.url,
              dispatcher,
              prompt(r * 100 + i, 64),
              tokens,
              {},
              { 'X-data-parallel-rank': String(i) },
            ),
          ),
        );
        const gaps = results.flatMap((x) => x.itlMs);
        itl.push(p50(gaps));
      }
      const requestsPerSecond = (n * rounds * 1000) / (performance.now() - started);
      await dispatcher.close();
      out.push({ n, itl, rssMiB: rssMiB(server.pid), requestsPerSecond });
    } finally {
      await server.stop();
    }
    if (!replicaWithin(out.at(-1) as ReplicaRun)) break;
  }
  return out;
}
