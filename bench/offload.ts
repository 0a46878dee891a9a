/**
 * `npm run bench -- offload [--prompt 2048] [--redis-values 400] [--repeats 3]`:
 * 1. Time to first token of a repeated prompt on `small`: recompute (no connector, the
 *    baseline), CPU tier hit, fs tier hit, Redis tier hit, each as a speed-up over recompute.
 *    Prefix caching is off so every repeat either recomputes or loads through the connector;
 *    fs and Redis are measured on a fresh engine whose CPU tier holds nothing (0 slots), so
 *    every chunk comes from the secondary tier.
 * 2. Redis tier put/get throughput (pipelined batches of 16, one value = one chunk of
 *    `small`) next to `redis-benchmark -t set,get -d SIZE -n N -P 16` on the same server.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { FRAME_HEADER_BYTES } from '../src/connectors/offloading/block-frame.ts';
import { RedisTier } from '../src/connectors/offloading/redis-tier.ts';
import { AsyncEngine } from '../src/engine/async-engine.ts';
import { samplingParams } from '../src/engine/llm.ts';
import { setLogLevel } from '../src/logging/logger.ts';
import { startRedis } from '../test/connectors/redis-helpers.ts';

function arg(args: string[], name: string, fallback: number): number {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : fallback;
}

const MiB = 1 << 20;

interface TtftResult {
  ttftMs: number;
  externalTokens: number;
}

async function ttft(engine: AsyncEngine, prompt: number[], id: string): Promise<TtftResult> {
  const t0 = performance.now();
  let first = 0;
  let external = 0;
  for await (const d of engine.generate({
    requestId: id,
    promptTokenIds: prompt,
    sampling: samplingParams({ maxTokens: 1, temperature: 0, ignoreEos: true }),
  })) {
    if (first === 0 && d.newTokenIds.length > 0) first = performance.now() - t0;
    if (d.finished) external = d.metrics.numExternalTokens;
  }
  return { ttftMs: first, externalTokens: external };
}

function engineOptions(promptLen: number, extra: Record<string, unknown> | null): Record<string, unknown> {
  return {
    model: 'small',
    block_size: 16,
    num_gpu_blocks: Math.ceil(promptLen / 16) + 8,
    max_model_len: promptLen + 16,
    max_num_batched_tokens: promptLen + 16,
    enable_prefix_caching: false,
    kv_transfer_config: extra
      ? { kv_connector: 'OffloadingConnector', kv_role: 'kv_both', kv_connector_extra_config: extra }
      : null,
  };
}

/** Best TTFT over `repeats` runs of the prompt on one engine (after `warm` unmeasured runs). */
async function measure(
  options: Record<string, unknown>,
  prompt: number[],
  repeats: number,
  warm: number,
): Promise<TtftResult> {
  const engine = await AsyncEngine.create(options);
  try {
    for (let i = 0; i < warm; i++) await ttft(engine, prompt, `warm-${i}`);
    let best: TtftResult = { ttftMs: Number.POSITIVE_INFINITY, externalTokens: 0 };
    for (let i = 0; i < repeats; i++) {
      const r = await ttft(engine, prompt, `run-${i}`);
      if (r.ttftMs < best.ttftMs) best = r;
    }
    await engine.waitIdle();
    return best;
  } finally {
    await engine.shutdown();
  }
}

/** A fresh engine whose CPU tier has no slots: every chunk comes from the secondary tier. */
async function measureSecondary(
  promptLen: number,
  prompt: number[],
  tier: Record<string, unknown>,
  repeats: number,
): Promise<TtftResult> {
  const extra = { cpu_bytes_to_use: 1, spec_name: 'TieringOffloadingSpec', secondary_tiers: [tier] };
  return measure(engineOptions(promptLen, extra), prompt, repeats, 0);
}

async function tierThroughput(
  url: string,
  valueBytes: number,
  n: number,
): Promise<{ putGBs: number; getGBs: number }> {
  const tier = new RedisTier({ url, clusterNodes: [], timeoutMs: 30_000, keyPrefix: 'bench' });
  const value = new Uint8Array(valueBytes).fill(7);
  const batch = 16;
  const keys = Array.from({ length: batch }, (_, i) => `k${i}`);
  try {
    await tier.putMany(keys.map((key) => ({ key, value })));
    let t0 = performance.now();
    for (let done = 0; done < n; done += batch) await tier.putMany(keys.map((key) => ({ key, value })));
    const putS = (performance.now() - t0) / 1000;
    t0 = performance.now();
    for (let done = 0; done < n; done += batch) {
      const got = await tier.getMany(keys);
      if (got.some((v) => v === null || v.byteLength !== valueBytes))
        throw new Error('redis tier get returned a miss');
    }
    const getS = (performance.now() - t0) / 1000;
    const bytes = Math.ceil(n / batch) * batch * valueBytes;
    return { putGBs: bytes / putS / 1e9, getGBs: bytes / getS / 1e9 };
  } finally {
    await tier.close();
  }
}

function redisBenchmark(port: number, size: number, n: number): { setGBs: number; getGBs: number } {
  const csv = execFileSync(
    'redis-benchmark',
    [
      '-h',
      '127.0.0.1',
      '-p',
      String(port),
      '-t',
      'set,get',
      '-d',
      String(size),
      '-n',
      String(n),
      '-P',
      '16',
      '--csv',
    ],
    { encoding: 'utf8' },
  );
  const rps = (test: string): number => {
    const line = csv.split('\n').find((l) => l.startsWith(`"${test}"`));
    if (!line) throw new Error(`redis-benchmark printed no ${test} line:\n${csv}`);
    return Number(JSON.parse(`[${line}]`)[1]);
  };
  return { setGBs: (rps('SET') * size) / 1e9, getGBs: (rps('GET') * size) / 1e9 };
}

export async function main(args: string[]): Promise<void> {
  setLogLevel('warn');
  const promptLen = arg(args, '--prompt', 2048);
  const repeats = arg(args, '--repeats', 3);
  const n = arg(args, '--redis-values', 400);
  const prompt = Array.from({ length: promptLen }, (_, i) => (i * 37 + 11) % 256);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvconnect-bench-offload-'));
  const redis = await startRedis(['--maxmemory', '0']);
  try {
    const fsTier = { type: 'fs', path: dir, timeout_ms: 10_000 };
    const redisTier = { type: 'redis', url: redis.url, timeout_ms: 10_000 };
    const recompute = await measure(engineOptions(promptLen, null), prompt, 1, 0);
    // The first run computes and stores into CPU, fs and Redis (write-through); later runs hit CPU.
    const producer = {
      cpu_bytes_to_use: 1024 * MiB,
      spec_name: 'TieringOffloadingSpec',
      secondary_tiers: [fsTier, redisTier],
    };
    const cpu = await measure(engineOptions(promptLen, producer), prompt, repeats, 1);
    const fsHit = await measureSecondary(promptLen, prompt, fsTier, repeats);
    const redisHit = await measureSecondary(promptLen, prompt, redisTier, repeats);

    // One value = one 16-token chunk of `small` (12 layers × K,V × 16 × 4 heads × 64 × fp32).
    const chunkBytes = 12 * 2 * 16 * 4 * 64 * 4;
    const tierRate = await tierThroughput(redis.url, chunkBytes, n);
    const rb = redisBenchmark(redis.port, chunkBytes + FRAME_HEADER_BYTES, n);

    const ratio = (r: TtftResult) => recompute.ttftMs / r.ttftMs;
    const rows: [string, string, string, string][] = [
      ['recompute (no connector)', recompute.ttftMs.toFixed(1), '0', '1.00×'],
      ['CPU tier hit', cpu.ttftMs.toFixed(1), String(cpu.externalTokens), `${ratio(cpu).toFixed(2)}×`],
      ['fs tier hit', fsHit.ttftMs.toFixed(1), String(fsHit.externalTokens), `${ratio(fsHit).toFixed(2)}×`],
      [
        'Redis tier hit',
        redisHit.ttftMs.toFixed(1),
        String(redisHit.externalTokens),
        `${ratio(redisHit).toFixed(2)}×`,
      ],
    ];
    console.log(
      `TTFT, ${promptLen}-token prompt on small (recompute: one run; tier hits: best of ${repeats})`,
    );
    console.log('| case | TTFT ms | tokens loaded | speed-up vs recompute |\n|---|---|---|---|');
    for (const r of rows) console.log(`| ${r.join(' | ')} |`);
    console.log(`\nRedis throughput, values of ${chunkBytes} bytes, ${n} values, pipelines of 16`);
    console.log('| op | RedisTier GB/s | redis-benchmark GB/s | ratio |\n|---|---|---|---|');
    console.log(
      `| put / SET | ${tierRate.putGBs.toFixed(3)} | ${rb.setGBs.toFixed(3)} | ${(tierRate.putGBs / rb.setGBs).toFixed(2)} |`,
    );
    console.log(
      `| get / GET | ${tierRate.getGBs.toFixed(3)} | ${rb.getGBs.toFixed(3)} | ${(tierRate.getGBs / rb.getGBs).toFixed(2)} |`,
    );
    const r3 = (x: number) => Math.round(x * 1000) / 1000;
    console.log(
      JSON.stringify({
        prompt_tokens: promptLen,
        ttft_recompute_ms: r3(recompute.ttftMs),
        ttft_cpu_hit_ms: r3(cpu.ttftMs),
        ttft_fs_hit_ms: r3(fsHit.ttftMs),
        ttft_redis_hit_ms: r3(redisHit.ttftMs),
        speedup_cpu_x: r3(ratio(cpu)),
        speedup_fs_x: r3(ratio(fsHit)),
        speedup_redis_x: r3(ratio(redisHit)),
        loaded_tokens_cpu: cpu.externalTokens,
        loaded_tokens_fs: fsHit.externalTokens,
        loaded_tokens_redis: redisHit.externalTokens,
        redis_value_bytes: chunkBytes,
        redis_values: n,
        redis_tier_put_gb_per_s: r3(tierRate.putGBs),
        redis_tier_get_gb_per_s: r3(tierRate.getGBs),
        redis_benchmark_set_gb_per_s: r3(rb.setGBs),
        redis_benchmark_get_gb_per_s: r3(rb.getGBs),
        redis_put_ratio: r3(tierRate.putGBs / rb.setGBs),
        redis_get_ratio: r3(tierRate.getGBs / rb.getGBs),
      }),
    );
  } finally {
    await redis.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
