/**
 * Server overhead: requests/s of `POST /v1/completions` with a tiny prompt and
 * max_tokens=1 (HTTP + validation + scheduling + one tiny forward), against a baseline in
 * the same run: a bare node:http server answering a static completion JSON. The load
 * generator runs in a worker thread (its own core) over undici keep-alive connections.
 *
 *   npm run bench -- serve-overhead [--duration 4] [--concurrency 32]
 */
import { createServer as createHttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Worker } from 'node:worker_threads';
import { buildEngineConfig } from '../src/config/engine-config.ts';
import { AsyncEngine } from '../src/engine/async-engine.ts';
import { samplingParams } from '../src/engine/sampling-params.ts';
import { setLogLevel } from '../src/logging/logger.ts';
import { createServer } from '../src/server/server.ts';

interface LoadResult {
  requests: number;
  errors: number;
  seconds: number;
  p50Ms: number;
  p99Ms: number;
}

const CLIENT = `
const { parentPort, workerData } = require('node:worker_threads');
const { Pool } = require(workerData.undiciPath);
const { url, body, concurrency, seconds, warmup } = workerData;
const pool = new Pool(url, { connections: concurrency, pipelining: 1 });
(async () => {
  const latencies = [];
  let errors = 0;
  let measuring = false;
  const stopAt = Date.now() + (warmup + seconds) * 1000;
  setTimeout(() => { measuring = true; }, warmup * 1000);
  let startedAt = 0;
  async function loop() {
    while (Date.now() < stopAt) {
      const t0 = performance.now();
      try {
        const res = await pool.request({ method: 'POST', path: '/v1/completions', body, headers: { 'content-type': 'application/json' } });
        await res.body.text();
        if (res.statusCode !== 200) errors++;
      } catch { errors++; }
      if (measuring) { if (!startedAt) startedAt = t0; latencies.push(performance.now() - t0); }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, loop));
  const elapsed = (performance.now() - startedAt) / 1000;
  latencies.sort((a, b) => a - b);
  const q = (p) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? 0;
  await pool.close();
  parentPort.postMessage({ requests: latencies.length, errors, seconds: elapsed, p50Ms: q(0.5), p99Ms: q(0.99) });
})();
`;

function runLoad(url: string, concurrency: number, seconds: number): Promise<LoadResult> {
  const body = JSON.stringify({ model: 'tiny', prompt: 'Hi', max_tokens: 1, temperature: 0 });
  const undiciPath = import.meta.resolve('undici').replace('file://', '');
  const worker = new Worker(CLIENT, {
    eval: true,
    workerData: { url, body, concurrency, seconds, warmup: 1, undiciPath },
  });
  return new Promise((resolve, reject) => {
    worker.once('message', (m: LoadResult) => {
      void worker.terminate();
      resolve(m);
    });
    worker.once('error', reject);
  });
}

async function baselineServer(): Promise<{ url: string; close: () => Promise<void> }> {
  const payload = JSON.stringify({
    id: 'cmpl-baseline',
    object: 'text_completion',
    created: 0,
    model: 'tiny',
    choices: [{ index: 0, text: 'x', logprobs: null, finish_reason: 'length', stop_reason: null }],
    usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
  });
  const server = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      JSON.parse(Buffer.concat(chunks).toString('utf8'));
      res.writeHead(200, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(payload),
      });
      res.end(payload);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** The same load without HTTP: `concurrency` loops calling engine.generate directly. */
async function engineAlone(engine: AsyncEngine, concurrency: number, seconds: number): Promise<LoadResult> {
  const ids = engine.tokenizer.encode('Hi');
  const sampling = samplingParams({ maxTokens: 1, temperature: 0 });

  const latencies: number[] = [];
  let next = 0;
  const warmupEnd = Date.now() + 1000;
  const stopAt = warmupEnd + seconds * 1000;
  let startedAt = 0;
  const loop = async (): Promise<void> => {
    while (Date.now() < stopAt) {
      const t0 = performance.now();
      for await (const _ of engine.generate({
        requestId: `bench-${next++}`,
        promptTokenIds: ids,
        sampling,
      })) {
        // drain
      }
      if (Date.now() >= warmupEnd) {
        if (!startedAt) startedAt = t0;
        latencies.push(performance.now() - t0);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
  latencies.sort((a, b) => a - b);
  const q = (p: number): number =>
    latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? 0;
  return {
    requests: latencies.length,
    errors: 0,
    seconds: (performance.now() - startedAt) / 1000,
    p50Ms: q(0.5),
    p99Ms: q(0.99),
  };
}

function flag(args: string[], name: string, fallback: number): number {
  const i = args.indexOf(`--${name}`);
  const v = i >= 0 ? Number(args[i + 1]) : Number.NaN;
  return Number.isFinite(v) && v > 0 ? v : fallback;
}

const fmt = (n: number, digits = 0): string => n.toFixed(digits);

export async function main(args: string[]): Promise<void> {
  setLogLevel('warn');
  const seconds = flag(args, 'duration', 4);
  const concurrency = flag(args, 'concurrency', 32);

  const base = await baselineServer();
  const baseline = await runLoad(base.url, concurrency, seconds);
  await base.close();

  const engine = await AsyncEngine.create(
    buildEngineConfig({ model: 'tiny', max_num_seqs: 256, max_num_batched_tokens: 8192 }),
  );
  const alone = await engineAlone(engine, concurrency, seconds);
  const server = createServer({ engine });
  const { url } = await server.start('127.0.0.1', 0);
  const measured = await runLoad(url, concurrency, seconds);
  await server.close();
  await engine.shutdown();

  const rps = (r: LoadResult): number => r.requests / r.seconds;
  const rows: Array<[string, LoadResult]> = [
    ['baseline: bare node:http, static JSON', baseline],
    ['engine alone: AsyncEngine.generate, no HTTP', alone],
    ['kvconnect serve (tiny, max_tokens=1)', measured],
  ];
  console.log(
    `concurrency ${concurrency}, ${seconds} s measured after 1 s warm-up, client in a worker thread (undici)`,
  );
  console.log('| server | req/s | p50 ms | p99 ms | errors |');
  console.log('| --- | --- | --- | --- | --- |');
  for (const [name, r] of rows) {
    console.log(`| ${name} | ${fmt(rps(r))} | ${fmt(r.p50Ms, 2)} | ${fmt(r.p99Ms, 2)} | ${r.errors} |`);
  }
  console.log(
    JSON.stringify({
      bench: 'serve-overhead',
      concurrency,
      duration_s: seconds,
      baseline_req_per_s: Math.round(rps(baseline)),
      baseline_p50_ms: Number(baseline.p50Ms.toFixed(3)),
      engine_alone_req_per_s: Math.round(rps(alone)),
      engine_alone_p50_ms: Number(alone.p50Ms.toFixed(3)),
      server_req_per_s: Math.round(rps(measured)),
      server_p50_ms: Number(measured.p50Ms.toFixed(3)),
      server_p99_ms: Number(measured.p99Ms.toFixed(3)),
      server_errors: measured.errors,
      server_vs_engine_alone: Number((rps(measured) / rps(alone)).toFixed(3)),
      target_req_per_s: 1000,
      meets_target: rps(measured) >= 1000,
    }),
  );
}
