import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { loadTrace, type TraceEntry } from '../../src/bench-serve/trace.ts';
import { SIMULATION_DEFAULTS, simulate, traceReuse, traceTokens } from '../../src/bench-trace/index.ts';

const MINI = fileURLToPath(new URL('./fixtures/mooncake-mini.jsonl', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const entries = loadTrace(MINI).entries;

const entry = (inputLength: number, hashIds: number[], line = 1): TraceEntry => ({
  timestampMs: 0,
  inputLength,
  outputLength: 1,
  hashIds,
  line,
});

test("the trace's own reuse and the engine-rule reuse on a hand-counted trace", () => {
  const trace = [entry(1000, [0, 1]), entry(1500, [0, 1, 2]), entry(1024, [0, 1])];
  const r = traceReuse(trace, 512);
  assert.equal(r.promptTokens, 3524);
  // Request 2 sees ids 0,1 (1024 tokens); request 3 sees 0,1 (capped at its 1024 tokens).
  assert.equal(r.traceHitTokens, 1024 + 1024);
  // Engine: request 1 cached only block 0 (block 1 held 488 tokens); request 2 hits 512;
  // request 2 cached blocks 0,1; request 3 may hit at most floor(1023/512) = 1 block.
  assert.equal(r.engineHitTokens, 512 + 512);
  // With 16-token blocks request 2 also hits the 30 full blocks of id 1 that request 1 held.
  assert.equal(traceReuse(trace, 16).engineHitTokens, 992 + 1008);
  const tokens = traceTokens(trace[1]!, 100);
  assert.equal(tokens.length, 1500);
  assert.deepEqual(tokens.slice(510, 514), [510, 511, 512, 513]);
  assert.deepEqual(
    traceTokens(trace[0]!, 100).slice(0, 1000),
    tokens.slice(0, 1000),
    'same ids, same tokens',
  );
});

for (const blockSize of [512, 16]) {
  test(`an unbounded cache hits exactly what the trace allows (${blockSize}-token blocks)`, async () => {
    const reuse = traceReuse(entries, blockSize);
    const r = await simulate(
      entries,
      { deviceBlocks: null, cpuBytes: null },
      { ...SIMULATION_DEFAULTS, blockSize, maxNumSeqs: 1 },
    );
    assert.equal(r.requests, entries.length);
    assert.equal(r.prompt_tokens, reuse.promptTokens);
    assert.equal(r.device_hit_tokens, reuse.engineHitTokens);
    assert.ok(
      r.hit_ratio > 0.3 && r.hit_ratio <= reuse.traceHitTokens / reuse.promptTokens + 0.01,
      String(r.hit_ratio),
    );
  });
}

test('hit ratio grows with capacity; a CPU tier recovers what a small device cache evicted', async () => {
  const opts = { ...SIMULATION_DEFAULTS, maxOutputLen: 32 };
  const small = await simulate(entries, { deviceBlocks: 20, cpuBytes: null }, opts);
  const medium = await simulate(entries, { deviceBlocks: 80, cpuBytes: null }, opts);
  const unbounded = await simulate(entries, { deviceBlocks: null, cpuBytes: null }, opts);
  assert.ok(small.hit_ratio < medium.hit_ratio, `${small.hit_ratio} < ${medium.hit_ratio}`);
  assert.ok(medium.hit_ratio <= unbounded.hit_ratio, `${medium.hit_ratio} <= ${unbounded.hit_ratio}`);
  assert.ok(small.steps > 0 && small.seconds > 0);
  // tiny model, 512-token blocks: 1 MiB per block; 256 MiB holds 256 blocks on the CPU tier.
  const tiered = await simulate(entries, { deviceBlocks: 20, cpuBytes: 256 * 2 ** 20 }, opts);
  assert.ok(tiered.cpu_hit_tokens > 0, 'the CPU tier served hits');
  assert.ok(tiered.hit_ratio > small.hit_ratio + 0.05, `${tiered.hit_ratio} vs ${small.hit_ratio}`);
  assert.equal(tiered.hit_ratio, tiered.device_hit_ratio + tiered.cpu_hit_ratio);
  await assert.rejects(
    simulate(entries, { deviceBlocks: 2, cpuBytes: null }, opts),
    /cannot hold the trace's longest request/,
  );
});

test('kvconnect bench trace --simulate: table, final JSON line, JSON file and SVG; no --simulate is exit 2', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvc-trace-'));
  const run = promisify(execFile);
  const cli = ['--import', 'tsx', 'src/cli/main.ts', 'bench', 'trace', '--trace', MINI];
  try {
    const json = join(dir, 'r.json');
    const svg = join(dir, 's.svg');
    const { stdout } = await run(
      process.execPath,
      [
        ...cli,
        '--simulate',
        '--device-blocks',
        '20,80,unbounded',
        '--cpu-bytes',
        'none,64M',
        '--result-json',
        json,
        '--svg',
        svg,
      ],
      { cwd: ROOT, env: { ...process.env, KVCONNECT_LOG_LEVEL: 'error' } },
    );
    assert.match(stdout, /the trace's own reuse/);
    assert.match(stdout, /device blocks\s+device tokens\s+CPU tier\s+hit ratio/);
    const last = JSON.parse(stdout.trim().split('\n').at(-1)!);
    assert.equal(last.points.length, 6);
    assert.equal(last.block_size_tokens, 512);
    assert.deepEqual(JSON.parse(readFileSync(json, 'utf8')), last);
    const picture = readFileSync(svg, 'utf8');
    assert.match(picture, /^<svg/);
    assert.equal((picture.match(/<polyline/g) ?? []).length, 2, 'one curve per CPU tier size');
    await assert.rejects(run(process.execPath, cli, { cwd: ROOT }), (e: { code: number; stderr: string }) => {
      assert.equal(e.code, 2);
      assert.match(e.stderr, /bench trace needs --simulate/);
      return true;
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
