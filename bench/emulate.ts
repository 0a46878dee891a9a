/**
 * Emulated deployments (docs/emulation.md): how closely a `kvconnect serve --mode random`
 * server keeps the time its step-time model says, as a streaming client sees it. The
 * baseline of each row is the configured model itself, evaluated as a function on the same
 * batches (with its jitter, sampled many times): the figure is the ratio of the measured p50
 * to the model's p50, median over rounds with min–max; the goal is within ±5%.
 *
 * - the three published llm-d-inference-sim profiles, each with its constant and per-token
 *   file: batch-1 TTFT (256-token prompt) and ITL;
 * - the roofline built-ins: batch-1 TTFT and ITL, also against the reference ranges;
 * - ITL against batch size at a fixed context (roofline, llama-3.1-8b on h100).
 *
 *   npm run bench -- emulate [--rounds 5] [--requests 4] [--tokens 24]
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { sendStreaming } from '../src/bench-serve/sse-client.ts';
import { buildEmulationConfig } from '../src/config/emulation-config.ts';
import { loadSimConfigFile } from '../src/config/sim-config-file.ts';
import { type ServeProcess, startServe } from '../src/demo/processes.ts';
import { createStepTimeModel } from '../src/engine/timing/emulation.ts';
import type { ScheduledSeq, StepBatch } from '../src/engine/timing/step-batch.ts';
import { setLogLevel } from '../src/logging/logger.ts';
import { benchArgs, positiveInteger } from './_args.ts';
import { fmt, json, loadAverage, percentile, summarize } from './_rounds.ts';

const PROFILE_DIR = new URL('../test/fixtures/sim-latency-profiles/', import.meta.url).pathname;
const PROFILES = ['8b-h100-balanced', '70b-h100-tp8-throughput', 'small-l40s-edge'];
const PROMPT = 256;

interface Row {
  name: string;
  metric: 'TTFT' | 'ITL';
  modelP50: number;
  measured: number[];
  reference?: [number, number];
}

function prompt(seed: number, len: number): number[] {
  return Array.from({ length: len }, (_, i) => 10 + ((seed * 7919 + i * 31) % 200));
}

function seq(over: Partial<ScheduledSeq>): ScheduledSeq {
  return {
    reqId: 'b',
    numNewTokens: 1,
    contextBefore: 0,
    numPromptTokens: PROMPT,
    numCachedPromptTokens: 0,
    firstChunk: false,
    firstToken: false,
    decode: false,
    remotePrefill: false,
    ...over,
  };
}

/** p50 of the model on one batch shape, over many draws of its jitter. */
function modelP50(options: Record<string, unknown>, batch: StepBatch): number {
  const model = createStepTimeModel(buildEmulationConfig(options, 12345));
  if (!model) throw new Error('no step-time model');
  const draws = Array.from({ length: 2001 }, () => model.stepMs(batch)).sort((a, b) => a - b);
  return percentile(draws, 50);
}

/** Sequential streaming requests; per request its TTFT and the median of its ITLs. */
async function measure(
  server: ServeProcess,
  requests: number,
  tokens: number,
  concurrency: number,
  promptLen: number,
  round: number,
): Promise<{ ttft: number[]; itl: number[] }> {
  const dispatcher = new Agent({ connections: concurrency });
  const ttft: number[] = [];
  const itl: number[] = [];
  const runStart = performance.now();
  try {
    for (let i = 0; i < requests; i++) {
      const results = await Promise.all(
        Array.from({ length: concurrency }, (_, c) =>
          sendStreaming({
            url: `${server.url}/v1/completions`,
            body: {
              model: 'emulated',
              prompt: prompt(round * 1000 + i * 64 + c, promptLen),
              max_tokens: tokens,
              ignore_eos: true,
              stream: true,
            },
            chat: false,
            headers: {},
            dispatcher,
            timeoutMs: 120_000,
            promptLen,
            runStart,
          }),
        ),
      );
      for (const r of results) {
        if (!r.ok) throw new Error(`request failed: ${r.error}`);
        ttft.push(r.ttftMs);
        const sorted = [...r.itlMs].sort((a, b) => a - b);
        itl.push(percentile(sorted, 50));
      }
    }
  } finally {
    await dispatcher.close();
  }
  return { ttft, itl };
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

function p50(values: number[]): number {
  return percentile(
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

  // 1. The sim's profiles, loaded unchanged (port and model overridden by flags).
  for (const profile of PROFILES) {
    for (const calc of ['constant', 'per-token']) {
      const file = join(PROFILE_DIR, `${profile}-${calc}.yaml`);
      const options = loadSimConfigFile(file).emulation;
      const name = `${profile} (${calc})`;
      const ttftRow: Row = {
        name,
        metric: 'TTFT',
        modelP50: modelP50(options, {
          seqs: [seq({ numNewTokens: PROMPT, firstChunk: true, firstToken: true })],
          maxNumSeqs: 64,
        }),
        measured: [],
      };
      const itlRow: Row = {
        name,
        metric: 'ITL',
        modelP50: modelP50(options, { seqs: [seq({ contextBefore: PROMPT, decode: true })], maxNumSeqs: 64 }),
        measured: [],
      };
      // A copy so the bench reads the file as a user passes it (--config), max-num-seqs included.
      const copy = join(dir, `${profile}-${calc}.yaml`);
      writeFileSync(copy, readFileSync(file));
      await withServer(['--config', copy, '--max-model-len', '1024'], async (server) => {
        for (let r = 0; r < rounds; r++) {
          const m = await measure(server, requests, tokens, 1, PROMPT, r);
          ttftRow.measured.push(p50(m.ttft));
          itlRow.measured.push(p50(m.itl));
        }
      });
      rows.push(ttftRow, itlRow);
    }
  }

  // 2. Roofline built-ins at batch 1.
  const targets: Array<[string, number, [number, number], [number, number]]> = [
    ['llama-3.1-8b', 1, [60, 120], [10, 15]],
    ['mistral-7b', 1, [60, 120], [10, 15]],
    ['qwen3-32b', 2, [160, 280], [20, 30]],
    ['llama-3.1-70b', 8, [150, 250], [18, 28]],
  ];
  for (const [model, tp, ttftRef, itlRef] of targets) {
    const flags = [
      '--latency-calculator',
      'roofline',
      '--target-model',
      model,
      '--target-accelerator',
      'h100',
      '--target-tp',
      String(tp),
    ];
    const options = { 'latency-calculator': 'roofline', 'target-model': model, 'target-tp': String(tp) };
    const name = `roofline ${model} ${tp}×h100`;
    const ttftRow: Row = {
      name,
      metric: 'TTFT',
      modelP50: modelP50(options, {
        seqs: [seq({ numNewTokens: PROMPT, firstChunk: true, firstToken: true })],
        maxNumSeqs: 64,
      }),
      measured: [],
      reference: ttftRef,
    };
    // Decode context grows over the request: the model at its midpoint.
    const itlRow: Row = {
      name,
      metric: 'ITL',
      modelP50: modelP50(options, {
        seqs: [seq({ contextBefore: PROMPT + tokens / 2, decode: true })],
        maxNumSeqs: 64,
      }),
      measured: [],
      reference: itlRef,
    };
    await withServer([...flags, '--max-model-len', '1024'], async (server) => {
      for (let r = 0; r < rounds; r++) {
        const m = await measure(server, requests, tokens, 1, PROMPT, r);
        ttftRow.measured.push(p50(m.ttft));
        itlRow.measured.push(p50(m.itl));
      }
    });
    rows.push(ttftRow, itlRow);
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
      '--max-model-len',
      '1024',
      '--max-num-seqs',
      '64',
      '--kv-cache-memory-bytes',
      '256M',
    ],
    async (server) => {
      for (const batch of [1, 8, 32]) {
        const row: Row = {
          name: `roofline llama-3.1-8b, batch ${batch}, context 512`,
          metric: 'ITL',
          modelP50: modelP50(options8b, {
            seqs: Array.from({ length: batch }, () => seq({ contextBefore: 512 + tokens / 2, decode: true })),
            maxNumSeqs: 64,
          }),
          measured: [],
        };
        for (let r = 0; r < rounds; r++) {
          const m = await measure(server, 1, tokens, batch, 512, r + batch * 100);
          row.measured.push(p50(m.itl));
        }
        batchRows.push(row);
      }
    },
  );
  rows.push(...batchRows);

  const header = [
    'configuration',
    'metric',
    'model p50 ms',
    'measured p50 ms (min–max)',
    'ratio (min–max)',
    'reference',
  ];
  const lines = rows.map((row) => {
    const s = summarize(row.measured);
    const ratio = summarize(row.measured.map((m) => m / row.modelP50));
    return [
      row.name,
      row.metric,
      row.modelP50.toFixed(1),
      fmt(s, 1),
      fmt(ratio, 3),
      row.reference ? `${row.reference[0]}–${row.reference[1]}` : '',
    ];
  });
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => (l[i] ?? '').length)));
  const print = (cells: string[]): void =>
    console.log(cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  '));
  print(header);
  for (const l of lines) print(l);
  const within = rows.filter(
    (row) => Math.abs(summarize(row.measured).median / row.modelP50 - 1) <= 0.05,
  ).length;
  console.log(
    `\n${within} of ${rows.length} rows within ±5% of the model at p50; load average ${loadAverage()}`,
  );
  console.log(
    JSON.stringify({
      bench: 'emulate',
      rounds,
      requests,
      tokens,
      within5pct: within,
      rows: rows.map((row) => ({
        name: row.name,
        metric: row.metric,
        model_p50_ms: Number(row.modelP50.toFixed(2)),
        measured_p50_ms: json(summarize(row.measured), 2),
        ratio: json(summarize(row.measured.map((m) => m / row.modelP50)), 3),
        ...(row.reference ? { reference_ms: row.reference } : {}),
      })),
    }),
  );
}
