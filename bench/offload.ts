/**
 * `npm run bench -- offload [--prompt 2048] [--rounds 5] [--redis-values 400]`:
 * 1. Time to first token of a repeated prompt on `small`, every case measured once per
 *    round in rotating order: recompute (no connector, the baseline), a CPU tier hit, an fs
 *    tier hit and a Redis tier hit; the speed-up of a case is its round's recompute TTFT over
 *    its TTFT, reported as the median of the rounds with min–max. Prefix caching is off so a
 *    repeat either recomputes or loads through the connector; fs and Redis are read by
 *    engines whose CPU tier has no slots, so every chunk comes from the secondary tier. The
 *    fs tier's files are dropped from the page cache before each fs read (`dd oflag=nocache
 *    conv=fdatasync`, checked with `fincore`): those reads come from the disk.
 * 2. Redis tier put/get against `redis-benchmark` with the same client count (1 connection)
 *    and pipelining (16), one value = one chunk of `small`, alternating, per-round ratios.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { FRAME_HEADER_BYTES } from '../src/connectors/offloading/block-frame.ts';
import { AsyncEngine } from '../src/engine/async-engine.ts';
import { samplingParams } from '../src/engine/llm.ts';
import { setLogLevel } from '../src/logging/logger.ts';
import { redisCommand, startRedis } from '../test/helpers/redis.ts';
import { benchArgs, positiveInteger } from './_args.ts';
import { redisBenchmark, tierThroughput } from './_redis-baseline.ts';
import { alternate, fmt, json, loadAverage, pairwiseRatio, type Summary, summarize } from './_rounds.ts';

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

/** Chunk files of the fs tier (DIR/<model>_<digest>_r0/hhh/hh_gN/<hash>.bin). */
function tierFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.bin'))
    .map((f) => path.join(dir, f));
}

/**
 * Writes back and drops the fs tier's files from the page cache, then returns how many of
 * their bytes are still resident (`fincore`), or null when the tools are missing.
 */
function dropPageCache(dir: string): number | null {
  try {
    for (const file of tierFiles(dir))
      execFileSync('dd', [`of=${file}`, 'oflag=nocache', 'conv=notrunc,fdatasync', 'count=0', 'status=none']);
    const out = execFileSync('fincore', ['-b', '-n', '-o', 'RES', ...tierFiles(dir)], { encoding: 'utf8' });
    return out
      .split('\n')
      .filter((l) => l.trim() !== '')
      .reduce((n, l) => n + Number(l.trim()), 0);
  } catch {
    return null;
  }
}

/** Waits until the producer's write-through put every chunk into the fs dir and Redis. */
async function waitForWriteThrough(dir: string, redisPort: number, chunks: number): Promise<void> {
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    const keys = Number((await redisCommand(redisPort, 'DBSIZE')).replace(/[^0-9]/g, ''));
    if (tierFiles(dir).length >= chunks && keys >= chunks) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`the write-through did not store ${chunks} chunks within 120 s`);
}

type Case = 'recompute' | 'cpu' | 'fs' | 'redis';
const CASES: readonly Case[] = ['recompute', 'cpu', 'fs', 'redis'];

export async function main(args: string[]): Promise<void> {
  setLogLevel('warn');
  const {
    prompt: promptLen,
    rounds,
    'redis-values': n,
  } = benchArgs(
    'offload',
    {
      prompt: positiveInteger(2048, 'tokens of the repeated prompt'),
      rounds: positiveInteger(5, 'rounds, the cases rotating'),
      'redis-values': positiveInteger(400, 'values of one chunk each per Redis put/get measurement'),
    },
    args,
  );
  const prompt = Array.from({ length: promptLen }, (_, i) => (i * 37 + 11) % 256);
  const chunks = Math.floor(promptLen / 16);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvconnect-bench-offload-'));
  const redis = await startRedis(['--maxmemory', '0']);
  const engines: AsyncEngine[] = [];
  const create = async (extra: Record<string, unknown> | null): Promise<AsyncEngine> => {
    const engine = await AsyncEngine.create(engineOptions(promptLen, extra));
    engines.push(engine);
    return engine;
  };
  try {
    const fsTier = { type: 'fs', root_dir: dir, timeout_ms: 10_000 };
    const redisTier = { type: 'redis', url: redis.url, timeout_ms: 10_000 };
    const reader = (tier: Record<string, unknown>) => ({
      cpu_bytes_to_use: 1,
      spec_name: 'TieringOffloadingSpec',
      secondary_tiers: [tier],
    });
    const byCase: Record<Case, AsyncEngine> = {
      recompute: await create(null),
      // Its first run computes and writes through to CPU, fs and Redis; later runs hit its CPU tier.
      cpu: await create({
        cpu_bytes_to_use: 1024 * MiB,
        spec_name: 'TieringOffloadingSpec',
        secondary_tiers: [fsTier, redisTier],
      }),
      fs: await create(reader(fsTier)),
      redis: await create(reader(redisTier)),
    };
    await ttft(byCase.cpu, prompt, 'store');
    await waitForWriteThrough(dir, redis.port, chunks);
    await ttft(byCase.recompute, prompt, 'warm');

    const results: Record<Case, TtftResult[]> = { recompute: [], cpu: [], fs: [], redis: [] };
    const resident: number[] = [];
    let dropFailed = false;
    for (let round = 0; round < rounds; round++) {
      for (let k = 0; k < CASES.length; k++) {
        const which = CASES[(k + round) % CASES.length]!;
        if (which === 'fs') {
          const left = dropPageCache(dir);
          if (left === null) dropFailed = true;
          else resident.push(left);
        }
        results[which].push(await ttft(byCase[which], prompt, `${which}-${round}`));
      }
    }

    // One value = one 16-token chunk of `small` (12 layers × K,V × 16 × 4 heads × 64 × fp32).
    const chunkBytes = 12 * 2 * 16 * 4 * 64 * 4;
    const valueBytes = chunkBytes + FRAME_HEADER_BYTES;
    const { a: bench, b: tier } = await alternate(
      rounds,
      async () => redisBenchmark(redis.port, valueBytes, n),
      () => tierThroughput(redis.url, chunkBytes, n),
    );

    const ttfts = (c: Case): Summary => summarize(results[c].map((r) => r.ttftMs));
    const speedup = (c: Case): Summary =>
      pairwiseRatio(
        results[c].map((r) => r.ttftMs),
        results.recompute.map((r) => r.ttftMs),
      );
    const loaded = (c: Case): number => Math.min(...results[c].map((r) => r.externalTokens));
    const putRatio = pairwiseRatio(
      bench.map((b) => b.put),
      tier.map((t) => t.put),
    );
    const getRatio = pairwiseRatio(
      bench.map((b) => b.get),
      tier.map((t) => t.get),
    );
    const gb = (opsPerS: number[]): Summary => summarize(opsPerS.map((x) => (x * valueBytes) / 1e9));
    const cacheNote = dropFailed
      ? 'fs reads may come from the page cache (dd/fincore unavailable)'
      : `fs files dropped from the page cache before each fs read (resident bytes after the drop: max ${Math.max(...resident)})`;

    console.log(
      `TTFT, ${promptLen}-token prompt on small, ${rounds} rounds (each case once per round, rotating order); ` +
        `median (min–max); load average ${loadAverage()}`,
    );
    console.log(cacheNote);
    console.log(
      '| case | TTFT ms | tokens loaded (min) | speed-up vs recompute, per round |\n|---|---|---|---|',
    );
    for (const c of CASES) {
      const label = {
        recompute: 'recompute (no connector)',
        cpu: 'CPU tier hit',
        fs: 'fs tier hit (disk)',
        redis: 'Redis tier hit',
      }[c];
      console.log(
        `| ${label} | ${fmt(ttfts(c), 1)} | ${loaded(c)} | ${c === 'recompute' ? '1' : fmt(speedup(c), 2)}× |`,
      );
    }
    console.log(
      `\nRedis, ${n} values of ${chunkBytes} bytes (+${FRAME_HEADER_BYTES}-byte frame), 1 connection, pipelines of 16, ` +
        `${rounds} alternating rounds`,
    );
    console.log(
      '| op | RedisTier GB/s | redis-benchmark -c 1 -P 16 GB/s | ratio, per round |\n|---|---|---|---|',
    );
    console.log(
      `| put / SET | ${fmt(gb(tier.map((t) => t.put)), 3)} | ${fmt(gb(bench.map((b) => b.put)), 3)} | ${fmt(putRatio, 2)} |`,
    );
    console.log(
      `| get / GET | ${fmt(gb(tier.map((t) => t.get)), 3)} | ${fmt(gb(bench.map((b) => b.get)), 3)} | ${fmt(getRatio, 2)} |`,
    );
    console.log(
      JSON.stringify({
        bench: 'offload',
        prompt_tokens: promptLen,
        rounds,
        load_average_1m: loadAverage(),
        fs_page_cache_dropped: !dropFailed,
        ttft_recompute_ms: json(ttfts('recompute'), 1),
        ttft_cpu_hit_ms: json(ttfts('cpu'), 1),
        ttft_fs_hit_ms: json(ttfts('fs'), 1),
        ttft_redis_hit_ms: json(ttfts('redis'), 1),
        speedup_cpu_x: json(speedup('cpu'), 2),
        speedup_fs_x: json(speedup('fs'), 2),
        speedup_redis_x: json(speedup('redis'), 2),
        loaded_tokens_min: { cpu: loaded('cpu'), fs: loaded('fs'), redis: loaded('redis') },
        redis_value_bytes: valueBytes,
        redis_values: n,
        redis_tier_put_gb_per_s: json(gb(tier.map((t) => t.put))),
        redis_tier_get_gb_per_s: json(gb(tier.map((t) => t.get))),
        redis_benchmark_set_gb_per_s: json(gb(bench.map((b) => b.put))),
        redis_benchmark_get_gb_per_s: json(gb(bench.map((b) => b.get))),
        redis_put_ratio: json(putRatio),
        redis_get_ratio: json(getRatio),
      }),
    );
  } finally {
    for (const engine of engines) await engine.shutdown();
    await redis.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
