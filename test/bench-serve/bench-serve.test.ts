import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Command } from 'commander';
import {
  distribution,
  interpolatedPercentile,
  parseTrace,
  planRequests,
  resolveBenchOptions,
  runBenchServe,
  traceRequests,
} from '../../src/bench-serve/index.ts';
import { registerBenchServeCommand } from '../../src/cli/commands/bench-serve.ts';
import { setLogLevel } from '../../src/logging/logger.ts';

setLogLevel('silent');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const FIRST_MS = 100;
const GAP_MS = 50;
const TOKENS = 4;

/** When the server got a request's body and when it wrote each token (performance.now()). */
interface Timeline {
  recvAt: number;
  sentAt: number[];
}

/**
 * An SSE server with known timing: first text after FIRST_MS, then a token every GAP_MS.
 * On a loaded machine its timers fire late, so it also records when it really wrote each
 * token: the client's figures are checked against that timeline.
 */
async function startSseServer(): Promise<{
  url: string;
  server: Server;
  bodies: Record<string, unknown>[];
  timelines: Timeline[];
}> {
  const bodies: Record<string, unknown>[] = [];
  const timelines: Timeline[] = [];
  const server = createServer(async (req, res) => {
    let text = '';
    for await (const c of req) text += c;
    const timeline: Timeline = { recvAt: performance.now(), sentAt: [] };
    timelines.push(timeline);
    const body = JSON.parse(text) as Record<string, unknown>;
    bodies.push(body);
    const chat = req.url === '/v1/chat/completions';
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.flushHeaders();
    await sleep(FIRST_MS);
    for (let i = 0; i < TOKENS; i++) {
      if (i > 0) await sleep(GAP_MS);
      const choice = chat ? { index: 0, delta: { content: `w${i} ` } } : { index: 0, text: `w${i} ` };
      res.write(`data: ${JSON.stringify({ choices: [choice] })}\n\n`);
      timeline.sentAt.push(performance.now());
    }
    res.write(
      `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 5, completion_tokens: TOKENS } })}\n\n`,
    );
    res.end('data: [DONE]\n\n');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server, bodies, timelines };
}

const median = (xs: number[]): number => interpolatedPercentile(xs, 50);
/** How much later than the server wrote a token the client may see it on a loaded CPU. */
const SLACK_MS = 1000;

describe('bench serve against a real SSE server', () => {
  let srv: Awaited<ReturnType<typeof startSseServer>>;
  let dir: string;
  before(async () => {
    srv = await startSseServer();
    dir = mkdtempSync(join(tmpdir(), 'kvc-bench-'));
  });
  after(() => {
    srv.server.closeAllConnections();
    srv.server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('TTFT, ITL, TPOT, E2E and throughput match the server timing', async () => {
    srv.timelines.length = 0;
    const run = await runBenchServe(
      resolveBenchOptions({
        model: 'tiny',
        baseUrl: srv.url,
        numPrompts: 6,
        maxConcurrency: 2,
        randomInputLen: 8,
        randomOutputLen: 4,
      }),
    );
    const s = run.summary;
    assert.equal(s.completed, 6);
    assert.equal(s.failed, 0);
    assert.equal(s.totalOutputTokens, 6 * TOKENS, 'output tokens from usage');
    // The client measures from before the server got the request to after it wrote a token:
    // never less than the server's own interval. Later only by delivery, which a loaded CPU
    // can stretch, so the upper bounds are loose; the lower bounds and the structure (ITL
    // between tokens, TTFT before the gaps) are what pin the definitions down.
    const t = srv.timelines;
    assert.equal(t.length, 6);
    const serverTtft = median(t.map((x) => x.sentAt[0]! - x.recvAt));
    const serverE2e = median(t.map((x) => x.sentAt.at(-1)! - x.recvAt));
    const serverGap = median(t.flatMap((x) => x.sentAt.slice(1).map((at, i) => at - x.sentAt[i]!)));
    const near = (what: string, measured: number, floor: number, actual: number) =>
      assert.ok(
        measured >= floor - 2 && measured <= actual + SLACK_MS,
        `${what}: measured ${measured.toFixed(1)} ms, the server's ${actual.toFixed(1)} ms`,
      );
    near('ttft p50', s.ttftMs.p50, serverTtft, serverTtft);
    near('itl p50', s.itlMs.p50, GAP_MS, serverGap);
    near('tpot mean', s.tpotMs.mean, GAP_MS, serverGap);
    near('e2e p50', s.e2eMs.p50, serverE2e, serverE2e);
    assert.ok(
      s.e2eMs.p50 - s.ttftMs.p50 >= (TOKENS - 1) * GAP_MS - 2,
      'TTFT is the first token, not the last',
    );
    // Two at a time, three waves.
    const e2e = FIRST_MS + (TOKENS - 1) * GAP_MS;
    assert.ok(s.durationS > (3 * e2e) / 1000 - 0.05, `duration ${s.durationS}`);
    assert.ok(Math.abs(s.requestThroughput - 6 / s.durationS) < 1e-9);
    assert.ok(Math.abs(s.outputThroughput - (6 * TOKENS) / s.durationS) < 1e-9);
    const body = srv.bodies.at(-1)!;
    assert.equal(body['stream'], true);
    assert.equal(body['model'], 'tiny');
    assert.equal(body['max_tokens'], 4);
  });

  test('the CLI command writes the table, the JSON file and the SVG (chat endpoint)', async () => {
    const program = new Command().exitOverride();
    registerBenchServeCommand(program);
    const jsonPath = join(dir, 'result.json');
    const svgPath = join(dir, 'chart.svg');
    const printed: string[] = [];
    const orig = console.log;
    console.log = (...a: unknown[]) => printed.push(a.join(' '));
    try {
      await program.parseAsync(
        [
          'bench',
          'serve',
          '--model',
          'tiny',
          '--base-url',
          srv.url,
          '--endpoint',
          '/v1/chat/completions',
          '--num-prompts',
          '3',
          '--request-rate',
          '20',
          '--result-json',
          jsonPath,
          '--svg',
          svgPath,
        ],
        { from: 'user' },
      );
    } finally {
      console.log = orig;
    }
    assert.match(printed.join('\n'), /Successful requests\s+3/);
    assert.match(printed.join('\n'), /TTFT/);
    const result = JSON.parse(readFileSync(jsonPath, 'utf8')) as Record<string, unknown>;
    assert.equal(result['completed'], 3);
    assert.equal(result['request_rate'], 20);
    assert.equal((result['requests'] as unknown[]).length, 3);
    const ttft = result['p50_ttft_ms'] as number;
    assert.ok(ttft >= FIRST_MS - 2 && ttft < FIRST_MS + SLACK_MS, `p50_ttft_ms ${ttft}`);
    assert.ok(Array.isArray(srv.bodies.at(-1)!['messages']));
    const svg = readFileSync(svgPath, 'utf8');
    assert.match(svg, /^<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
    assert.match(svg, /TTFT \(ms\), 3 requests/);
    assert.match(svg, /ITL \(ms\), 9 gaps/);
    assert.ok((svg.match(/class="bar"/g) ?? []).length === 40);
  });

  test('a refused connection counts as failed, not a crash', async () => {
    const run = await runBenchServe(
      resolveBenchOptions({ model: 'm', baseUrl: 'http://127.0.0.1:1', numPrompts: 2 }),
    );
    assert.equal(run.summary.completed, 0);
    assert.equal(run.summary.failed, 2);
  });
});

describe('workload planning', () => {
  test('percentiles interpolate like numpy', () => {
    assert.equal(interpolatedPercentile([1, 2, 3, 4], 50), 2.5);
    assert.equal(interpolatedPercentile([10], 99), 10);
    assert.deepEqual(distribution([1, 3]), { mean: 2, p50: 2, p90: 2.8, p99: 2.98 });
  });

  test('Poisson arrivals: increasing, mean gap close to 1/rate, reproducible by seed', () => {
    const o = resolveBenchOptions({ model: 'm', numPrompts: 2000, requestRate: 50, seed: 3 });
    const a = planRequests(o).planned.map((r) => r.arrivalMs!);
    const gaps = a.slice(1).map((t, i) => t - a[i]!);
    assert.ok(gaps.every((g) => g >= 0));
    const mean = gaps.reduce((s, g) => s + g, 0) / gaps.length;
    assert.ok(Math.abs(mean - 20) < 2, `mean gap ${mean}`);
    assert.deepEqual(
      planRequests(o).planned.map((r) => r.arrivalMs),
      a,
    );
    const inf = planRequests(resolveBenchOptions({ model: 'm', numPrompts: 3 })).planned;
    assert.ok(inf.every((r) => r.arrivalMs === null));
  });

  test('random lengths stay within the range ratio', () => {
    const o = resolveBenchOptions({
      model: 'm',
      numPrompts: 200,
      randomInputLen: 100,
      randomOutputLen: 10,
      randomRangeRatio: 0.5,
    });
    for (const r of planRequests(o).planned) {
      assert.ok(r.promptLen >= 50 && r.promptLen <= 150);
      assert.equal(r.prompt.trim().split(' ').length, r.promptLen);
      assert.ok(r.maxTokens >= 5 && r.maxTokens <= 15);
    }
  });

  test('trace parsing reports malformed lines with their numbers', () => {
    const text = [
      '{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]}',
      '{"timestamp": 10, "input_length": 600',
      '',
      '{"timestamp": 20, "input_length": -1, "output_length": 5, "hash_ids": []}',
      '{"timestamp": 30, "input_length": 700, "output_length": 2, "hash_ids": [0, 2]}',
      '{"timestamp": 40, "input_length": 7, "output_length": 2, "hash_ids": "x"}',
    ].join('\n');
    const parsed = parseTrace(text);
    assert.deepEqual(
      parsed.entries.map((e) => e.line),
      [1, 5],
    );
    assert.deepEqual(parsed.problems, [
      { line: 2, message: 'not valid JSON' },
      { line: 4, message: 'input_length must be a non-negative integer' },
      { line: 6, message: 'hash_ids must be an array of non-negative integers' },
    ]);
  });

  test('trace replay: equal hash ids give equal text, lengths scale with block tokens, timestamps scale', () => {
    const { entries } = parseTrace(
      [
        '{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]}',
        '{"timestamp": 500, "input_length": 700, "output_length": 300, "hash_ids": [0, 2]}',
        '{"timestamp": 900, "input_length": 10, "output_length": 1, "hash_ids": [3]}',
      ].join('\n'),
    );
    const planned = traceRequests(entries, {
      blockTokens: 16,
      timeScale: 0.1,
      maxRequests: 10,
      maxOutputLen: 50,
    });
    const w = planned.map((r) => r.prompt.trim().split(' '));
    assert.deepEqual(
      w.map((x) => x.length),
      [Math.ceil((1000 * 16) / 512), Math.ceil((700 * 16) / 512), 1],
    );
    assert.deepEqual(w[0]!.slice(0, 16), w[1]!.slice(0, 16), 'hash id 0 is the same block in both');
    assert.notDeepEqual(w[0]!.slice(16, 22), w[1]!.slice(16, 22), 'ids 1 and 2 differ');
    assert.deepEqual(
      planned.map((r) => r.arrivalMs),
      [0, 50, 90],
    );
    assert.deepEqual(
      planned.map((r) => r.maxTokens),
      [5, 50, 1],
    );
    assert.equal(traceRequests(entries, { blockTokens: 16, timeScale: 1, maxRequests: 2 }).length, 2);
  });

  test('a trace file with only bad lines is an error naming the first bad line', () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvc-trace-'));
    try {
      const path = join(dir, 't.jsonl');
      writeFileSync(path, 'nope\n');
      assert.throws(
        () => planRequests(resolveBenchOptions({ model: 'm', trace: path })),
        (e: Error & { code?: string; hint?: string }) =>
          e.code === 'BENCH_TRACE_EMPTY' && /Line 1: not valid JSON/.test(e.hint ?? ''),
      );
      writeFileSync(path, '{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [0]}\nbad\n');
      const { planned, traceProblems } = planRequests(
        resolveBenchOptions({ model: 'm', trace: path, traceBlockTokens: 4 }),
      );
      assert.equal(planned.length, 1);
      assert.deepEqual(traceProblems, [{ line: 2, message: 'not valid JSON' }]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('what counts as a received token (as vLLM bench serve counts it)', () => {
  /** Serves one fixed SSE body for every request. */
  async function fixedStream(events: string[]): Promise<{ url: string; close: () => void }> {
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        for (const e of events) res.write(`data: ${e}\n\n`);
        res.end('data: [DONE]\n\n');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => server.close() };
  }

  async function run(events: string[], endpoint: string) {
    const s = await fixedStream(events);
    try {
      const r = await runBenchServe(
        resolveBenchOptions({
          model: 'm',
          baseUrl: s.url,
          endpoint,
          numPrompts: 1,
          randomInputLen: 2,
          randomOutputLen: 1,
        }),
      );
      return r.summary;
    } finally {
      s.close();
    }
  }

  test('a completion chunk whose token decoded to no text still counts (a partial UTF-8 byte)', async () => {
    const r = await run(['{"choices":[{"index":0,"text":"","finish_reason":"length"}]}'], '/v1/completions');
    assert.equal(r.completed, 1);
    assert.equal(r.failed, 0);
  });

  test("chat's role-only opening chunk is not a token; a stream with nothing else fails", async () => {
    const role = '{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}';
    const failed = await run(
      [role, '{"choices":[],"usage":{"completion_tokens":0}}'],
      '/v1/chat/completions',
    );
    assert.equal(failed.failed, 1);
    const ok = await run(
      [role, '{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"length"}]}'],
      '/v1/chat/completions',
    );
    assert.equal(ok.completed, 1);
  });
});
