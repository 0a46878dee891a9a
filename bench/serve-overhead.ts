/**
 * Server overhead: successful requests/s of `POST /v1/completions` with a tiny prompt and
 * max_tokens=1 (HTTP + validation + scheduling + one tiny forward) against the same engine
 * driven without HTTP (AsyncEngine.generate, same concurrency): the figure is the
 * server / engine-alone ratio, per round, median of the rounds with min–max. The two sides
 * alternate; a bare node:http server answering a static JSON shows the HTTP ceiling. The
 * load generator runs in a worker thread (its own core) over undici keep-alive connections;
 * a request counts only if it answered 200 with a completion (errors are reported apart).
 *
 *   npm run bench -- serve-overhead [--rounds 5] [--duration 3] [--concurrency 32]
 */
import { createServer as createHttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Worker } from 'node:worker_threads';
import { buildEngineConfig } from '../src/config/engine-config.ts';
import { AsyncEngine } from '../src/engine/async-engine.ts';
import { samplingParams } from '../src/engine/sampling-params.ts';
import { setLogLevel } from '../src/logging/logger.ts';
import { createServer } from '../src/server/server.ts';
import { benchArgs, decimal, positiveInteger } from './_args.ts';
import { alternate, fmt, json, loadAverage, pairwiseRatio, summarize } from './_rounds.ts';

interface LoadResult {
  /** Successful requests (HTTP 200 with a completion) in the measured window. */
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
      let ok = false;
      try {
        const res = await pool.request({ method: 'POST', path: '/v1/completions', body, headers: { 'content-type': 'application/json' } });
        const text = await res.body.text();
        ok = res.statusCode === 200 && Array.isArray(JSON.parse(text).choices);
      } catch { ok = false; }
      if (!measuring) continue;
      if (!startedAt) startedAt = t0;
      if (ok) latencies.push(performance.now() - t0);
      else errors++;
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
  let errors = 0;
  const loop = async (): Promise<void> => {
    while (Date.now() < stopAt) {
      const t0 = performance.now();
      let reason: string | null = null;
      try {
        for await (const delta of engine.generate({
          requestId: `bench-${next++}`,
          promptTokenIds: ids,
          sampling,
        })) {
          if (delta.finished) reason = delta.finishReason;
        }
      } catch {
        reason = 'error';
      }
      if (Date.now() < warmupEnd) continue;
      if (!startedAt) startedAt = t0;
      if (reason === 'length' || reason === 'stop') latencies.push(performance.now() - t0);
      else errors++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
  latencies.sort((a, b) => a - b);
  const q = (p: number): number =>
    latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? 0;
  return {
    requests: latencies.length,
    errors,
    seconds: (performance.now() - startedAt) / 1000,
    p50Ms: q(0.5),
    p99Ms: q(0.99),
  };
}

const rps = (r: LoadResult): number => r.requests / r.seconds;

export async function main(args: string[]): Promise<void> {
  setLogLevel('warn');
  const {
    rounds,
    duration: seconds,
    concurrency,
  } = benchArgs(
    'serve-overhead',
    {
      rounds: positiveInteger(5, 'rounds, the two sides alternating'),
      duration: decimal(3, 'seconds of load per side and round, after 1 s of warm-up', {
        positive: true,
        value: 'seconds',
      }),
      concurrency: positiveInteger(32, 'requests in flight'),
    },
    args,
  );

  const engine = await AsyncEngine.create(
    buildEngineConfig({ model: 'tiny', max_num_seqs: 256, max_num_batched_tokens: 8192 }),
  );
  const server = createServer({ engine });
  const { url } = await server.start('127.0.0.1', 0);
  const base = await baselineServer();
  const bare: LoadResult[] = [];
  const { a: alone, b: served } = await alternate(
    rounds,
    async () => {
      bare.push(await runLoad(base.url, concurrency, seconds));
      return engineAlone(engine, concurrency, seconds);
    },
    () => runLoad(url, concurrency, seconds),
  );
  await base.close();
  await server.close();
  await engine.shutdown();

  const ratio = pairwiseRatio(alone.map(rps), served.map(rps));
  const rows: Array<[string, LoadResult[]]> = [
    ['bare node:http, static JSON (HTTP ceiling)', bare],
    ['engine alone: AsyncEngine.generate, no HTTP', alone],
    ['kvconnect serve (tiny, max_tokens=1)', served],
  ];
  console.log(
    `concurrency ${concurrency}; ${rounds} rounds of ${seconds} s after 1 s warm-up each, engine alone and ` +
      `server alternating; client in a worker thread (undici); load average ${loadAverage()}`,
  );
  console.log('| side | successful req/s, median (min–max) | p50 ms | p99 ms | errors |');
  console.log('| --- | --- | --- | --- | --- |');
  for (const [name, r] of rows) {
    const errors = r.reduce((n, x) => n + x.errors, 0);
    console.log(
      `| ${name} | ${fmt(summarize(r.map(rps)))} | ${fmt(summarize(r.map((x) => x.p50Ms)), 2)} | ` +
        `${fmt(summarize(r.map((x) => x.p99Ms)), 2)} | ${errors} |`,
    );
  }
  console.log(`server / engine alone, per round: ${fmt(ratio, 3)}`);
  console.log(
    JSON.stringify({
      bench: 'serve-overhead',
      concurrency,
      rounds,
      duration_s: seconds,
      load_average_1m: loadAverage(),
      server_vs_engine_alone_ratio: json(ratio),
      server_req_per_s: json(summarize(served.map(rps)), 0),
      engine_alone_req_per_s: json(summarize(alone.map(rps)), 0),
      bare_http_req_per_s: json(summarize(bare.map(rps)), 0),
      server_p50_ms: json(summarize(served.map((r) => r.p50Ms))),
      server_p99_ms: json(summarize(served.map((r) => r.p99Ms))),
      server_errors: served.reduce((n, r) => n + r.errors, 0),
      bare_http_errors: bare.reduce((n, r) => n + r.errors, 0),
    }),
  );
}
